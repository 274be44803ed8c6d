"""inspect_ai eval logs (.eval and .json) -> call and outcome records, read with inspect_ai's own reader.

Needs the optional extra `elo-per-token[inspect]`. Mapping (docs/imports.md):
* eval run (one log file) -> arm. `--arm-from auto` names each run by what differs between the runs
  given: model, task, solver, task/solver args, generate config (e.g. `temperature=0.7`); one run, or
  nothing differing, is named by its model. Or `--arm-from model|task|solver|file|<key>` where <key>
  is looked up in task args, solver args, the generate config and model args.
* sample -> task `<family>-<sample id>`, epoch -> replicate (epoch 1 = replicate 0). family = the
  task's name (with `--arm-from task`, the dataset's name, so different tasks stay comparable).
* scores -> outcome score in 0..1: C / P / I / N -> 1 / 0.5 / 0 / 0 and yes/no/true/false, numbers
  and numeric strings as they are (inspect's own value_to_float); a list or dict value -> the mean of its
  items, or one key with `--score scorer.key`. `--score scorer` picks the scorer (default: the first).
  A number outside 0..1 is a bad sample. No score (e.g. the sample errored) -> an ungraded outcome.
* per-sample `model_usage` -> one call per model: prompt tokens = input_tokens + cache reads/writes,
  completion tokens = output_tokens. The run's own model is role `sample` (strategy cost); any other
  model (a model-graded scorer) is role `judge` (evaluation cost, reported apart).
Errors name the log file, the sample's position in it (as the line) and the field.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from elo_per_token.analysis.imports.common import Collector
from elo_per_token.analysis.imports.zipcap import TooBig
from elo_per_token.contracts.errors import InputError
from elo_per_token.contracts.settings import read_float

LOG_SUFFIXES = (".eval", ".json")
NAMED = ("model", "task", "solver", "file")


def _require_inspect() -> Any:
    try:
        import inspect_ai.log as log_api
    except ImportError:
        raise InputError(
            "reading inspect_ai logs needs the optional extra: pip install 'elo-per-token[inspect]'",
            field="logs",
        ) from None
    return log_api


def expand_logs(paths: Sequence[str]) -> list[str]:
    """Files as given; folders searched recursively for *.eval and *.json; globs expanded.

    Args:
        paths: Log files, folders and globs.
    """
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(str(f) for f in Path(p).rglob("*") if f.suffix in LOG_SUFFIXES and f.is_file())
        elif any(c in p for c in "*?["):
            out += sorted(glob.glob(p, recursive=True))
        else:
            if not os.path.isfile(p):
                raise InputError("no such file or folder", file=p)
            out.append(p)
    if not out:
        raise InputError(
            "no inspect_ai logs (*.eval, *.json) found", file=paths[0] if len(paths) == 1 else None
        )
    return out


def describe(log: Any, file: str) -> dict[str, str]:
    """Everything that can name a run: model, task, solver, args and generate-config values.

    Args:
        log: An inspect_ai EvalLog.
        file: The log's file.
    """
    spec = log.eval
    solver = spec.solver or (" + ".join(s.solver for s in log.plan.steps) if log.plan else "")
    d = {"model": str(spec.model), "task": str(spec.task), "solver": str(solver), "file": Path(file).stem}
    cfg = spec.model_generate_config.model_dump(exclude_none=True) if spec.model_generate_config else {}
    for src in (spec.model_args or {}, cfg, spec.solver_args or {}, spec.task_args or {}):
        for k, v in src.items():
            d.setdefault(str(k), str(v))
    return d


def arm_names(descs: list[dict[str, str]], arm_from: str, files: list[str]) -> list[str]:
    """One arm name per log from its description (--arm-from): 'auto' picks the values that differ between the logs.

    Args:
        descs: describe() of each log.
        arm_from: auto | model | task | solver | an arg or generate-config key | file.
        files: The logs' files, in order.
    """
    if arm_from == "auto":
        keys = [k for k in descs[0] if k != "file" and len({d.get(k) for d in descs}) > 1]
        keys += sorted({k for d in descs for k in d if k not in descs[0]} - set(keys))
        if not keys:
            return [d["model"] for d in descs]
        if keys == ["model"]:
            return [d["model"] for d in descs]
        return [",".join(f"{k}={d.get(k, '-')}" for k in keys if k != "model") or d["model"] for d in descs]
    names = []
    for d, f in zip(descs, files, strict=True):
        if arm_from not in d:
            raise InputError(
                f"--arm-from {arm_from}: not a field of this run (it has: {', '.join(sorted(d))})",
                file=f,
                field="arm-from",
            )
        names.append(d[arm_from] if arm_from in NAMED else f"{arm_from}={d[arm_from]}")
    return names


def score_of(scores: dict[str, Any] | None, score_key: str | None) -> tuple[float | None, str | None, str]:
    """(score in 0..1 | None when unscored, bad field | None, message).

    Args:
        scores: A sample's scores (None: unscored).
        score_key: The scorer to use (None: the first).
    """
    from inspect_ai.scorer import value_to_float

    if not scores:
        return None, None, ""
    name, _, sub = (score_key or "").partition(".")
    name = name or next(iter(scores))
    if name not in scores:
        return None, "scores", f"no scorer '{name}' (the sample has: {', '.join(scores)})"
    value = scores[name].value
    to_float = value_to_float()
    field = f"scores.{name}.value"
    if isinstance(value, dict):
        if sub:
            if sub not in value:
                return None, field, f"no key '{sub}' in the score (it has: {', '.join(map(str, value))})"
            value = value[sub]
        else:
            value = list(value.values())
    if isinstance(value, list):
        vals = [to_float(v) for v in value]
        v = sum(vals) / len(vals) if vals else None
    else:
        v = to_float(value)
    if v is not None and not 0.0 <= v <= 1.0:
        return None, field, f"score {v:g} is outside 0..1 (pick a 0..1 score with --score scorer[.key])"
    return v, None, ""


# EPT_MAX_IMPORT_MB (contracts/settings.py) caps the uncompressed bytes of one log: inspect reads it whole, then more


def too_big(f: str) -> str | None:
    """Why a log must not be read, or None: an `.eval` (a zip) whose members inflate past the cap — checked from
    the declared sizes, which bound what Python's zipfile will inflate — or a `.json` log past it on disk. A
    1 MB `.eval` that inflates to 1 GiB took the import to 2.1 GiB.

    Args:
        f: The log file.
    """
    import os
    import zipfile

    cap = read_float("EPT_MAX_IMPORT_MB") * 2**20
    if not f.endswith(".eval"):
        size = os.path.getsize(f)
        return None if size <= cap else f"{size / 2**20:.0f} MB, over EPT_MAX_IMPORT_MB={cap / 2**20:g}"
    try:
        with zipfile.ZipFile(f) as z:
            total = sum(i.file_size for i in z.infolist())
    except (zipfile.BadZipFile, OSError) as e:
        return f"not a readable inspect_ai eval log (not a zip: {e})"
    if total > cap:
        return (
            f"inflates to {total / 2**20:.0f} MB, over EPT_MAX_IMPORT_MB={cap / 2**20:g} "
            "(a zip bomb, or a log to split or to import with a higher cap)"
        )
    return None


def _counted(f: str, used: int) -> int:
    """The bytes log `f` really inflates to (analysis.imports.zipcap: counted as they stream, declared sizes
    not trusted); TooBig naming the cap it crossed: the file's, or the import's with the logs before it."""
    from elo_per_token.analysis.imports.zipcap import TooBig, caps, log_bytes

    per_file, per_import = caps()
    room = per_import - used
    try:
        return log_bytes(f, min(per_file, room))
    except TooBig as e:
        if e.field is None or "past" not in e.why:
            raise
        cap = (
            f"EPT_MAX_IMPORT_MB={per_file / 2**20:g}"
            if per_file <= room
            else f"EPT_MAX_IMPORT_TOTAL_MB={per_import / 2**20:g} with the {used / 2**20:.0f} MB of the logs before it"
        )
        raise TooBig(
            e.field, f"{e.why} {cap} (a zip bomb, or logs to import in parts or with a higher cap)"
        ) from None


def _usage(u: Any) -> dict[str, int]:
    prompt = u.input_tokens + (u.input_tokens_cache_read or 0) + (u.input_tokens_cache_write or 0)
    return {"prompt_tokens": int(prompt), "completion_tokens": int(u.output_tokens)}


def _read_logs(paths: Sequence[str], log_api: Any, col: Collector) -> tuple[list[str], list[Any]]:
    """(files, logs) of the usable logs among paths; the others are reported to col (too big, unreadable,
    no samples)."""
    files, logs = [], []
    used = 0  # bytes the logs read so far inflate to: inspect holds every log, so the cap is on their sum
    for f in expand_logs(paths):
        if (why := too_big(f)) is not None:  # an honest size over the cap: said with the size
            col.bad(f, None, None, why)
            continue
        try:
            used += _counted(f, used)
        except TooBig as e:
            col.bad(f, None, e.field, e.why)
            continue
        try:
            log = log_api.read_eval_log(f)
        except Exception as e:  # inspect raises many types for a file that is not its log
            col.bad(f, None, None, f"not a readable inspect_ai eval log: {type(e).__name__}: {str(e)[:200]}")
            continue
        if not log.samples:
            col.bad(f, None, "samples", "the log has no samples (header-only or empty run)")
            continue
        files.append(f)
        logs.append(log)
    return files, logs


def import_inspect(
    paths: Sequence[str], *, arm_from: str = "auto", score_key: str | None = None, skip_bad: bool = False
) -> Collector:
    """Call and outcome records from Inspect eval logs.

    Args:
        paths: log files, folders and globs (see expand_logs).
        arm_from: what names an arm: auto | model | task | solver | an arg or generate-config key | file.
        score_key: the scorer to use (None: the first).
        skip_bad: record bad logs and samples and go on instead of stopping at the first.
    """
    log_api = _require_inspect()
    col = Collector(skip_bad=skip_bad)
    files, logs = _read_logs(paths, log_api, col)
    if not logs:
        raise InputError("no usable inspect_ai logs", file=paths[0] if len(paths) == 1 else None)
    arms = arm_names([describe(lg, f) for lg, f in zip(logs, files, strict=True)], arm_from, files)
    seen: dict[tuple[str, str, int], str] = {}
    for f, log, arm in zip(files, logs, arms, strict=True):
        family = (log.eval.dataset.name or "default") if arm_from == "task" else str(log.eval.task)
        if log.status != "success":
            col.notes.append(
                f"{f}: run status '{log.status}' — its {len(log.samples)} samples are imported as they are"
            )
        ident = {"strategy": arm, "budget_n": 1, "arm": arm, "family": family}
        for pos, s in enumerate(log.samples, start=1):
            task_id = f"{family}-{s.id}"
            if not isinstance(s.epoch, int) or s.epoch < 1:
                col.bad(f, pos, "epoch", "must be an integer >= 1")
                continue
            key = (task_id, arm, s.epoch - 1)
            if key in seen:
                col.bad(
                    f,
                    pos,
                    "id",
                    f"sample {s.id} epoch {s.epoch} of arm '{arm}' appears twice (first: {seen[key]}); "
                    "name the runs apart with --arm-from",
                )
                continue
            score, bad_field, msg = score_of(s.scores, score_key)
            if bad_field:
                col.bad(f, pos, bad_field, msg)
                continue
            seen[key] = f"{f} sample {pos}"
            base = {**ident, "task_id": task_id, "replicate": s.epoch - 1, "source": f"{f}#{pos}"}
            for model, u in (s.model_usage or {}).items():
                role = "sample" if model == log.eval.model else "judge"
                col.records.append({"kind": "call", **base, "role": role, "model": model, "usage": _usage(u)})
            if not s.model_usage:
                col.records.append(
                    {"kind": "call", **base, "role": "sample", "usage": None, "usage_missing": True}
                )
            col.records.append(
                {
                    "kind": "outcome",
                    **base,
                    "score": score,
                    **({"error": str(s.error.message)[:200]} if s.error else {}),
                }
            )
    return col
