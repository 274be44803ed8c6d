"""OpenAI Batch API files -> call and outcome records.

Inputs (formats as documented by OpenAI for /v1/batches):
* output file(s): one line per request, `{"id", "custom_id", "response": {"status_code", "request_id",
  "body": <ChatCompletion | Response | …>}, "error": null | {"code", "message"}}`. A 200 response's
  `body.usage` becomes one call record (prompt/completion tokens; a Responses-API body's
  input/output tokens; an embeddings body's prompt tokens with 0 completion tokens); a failed request (error, or a non-200 status) is not
  billed and is counted, not recorded;
* which task and arm each `custom_id` belongs to, from the first of:
  1. `--mapping FILE` (CSV or JSONL: custom_id, task_id, arm | strategy + budget_n, replicate, family, role),
  2. `--input FILE`, the batch input file, whose request `body.metadata` carries those keys
     (chat completions accept `metadata`; its values are strings, so budget_n/replicate may be "4"),
  3. `--id-template`, e.g. `{task_id}__{arm}__r{replicate}`, parsed out of the custom_id itself;
* `--outcomes FILE` (CSV or JSONL): scores, keyed by custom_id or by task_id + arm (+ replicate), with
  `score` in 0..1 or `correct`. One outcome per (task, arm, replicate).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elo_per_token.analysis.imports.common import (
    Collector,
    arm_fields,
    as_int,
    as_score,
    read_jsonl,
    read_rows,
)
from elo_per_token.contracts.errors import InputError

ID_FIELDS = ("task_id", "arm", "strategy", "budget_n", "replicate", "family", "role")


@dataclass(frozen=True)
class IdTemplate:
    """A parsed `--id-template`: the literal text around each field. Matching is linear in the custom_id: each
    field ends at the FIRST occurrence of the text that follows it (the last one at the template's end). A
    regex with one lazy group per field backtracks cubically on a long custom_id that does not match (2,000
    characters: 2.9 s; 100k: hours), so none is used."""

    literals: tuple[str, ...]  # len(fields) + 1: before the first field, between fields, after the last
    fields: tuple[str, ...]

    def match(self, cid: str) -> dict[str, str] | None:
        """{field: text} when `cid` has this shape, else None.

        Args:
            cid: A custom_id.
        """
        first, last = self.literals[0], self.literals[-1]
        if not cid.startswith(first) or not cid.endswith(last) or len(cid) < len(first) + len(last):
            return None
        pos, end, out = len(first), len(cid) - len(last), {}
        for i, name in enumerate(self.fields):
            sep = self.literals[i + 1]
            stop = end if i == len(self.fields) - 1 else cid.find(sep, pos + 1, end)
            if stop < 0 or stop <= pos:  # every field holds at least one character
                return None
            value = cid[pos:stop]
            if name in _DIGIT_FIELDS and not (value.isascii() and value.isdigit()):
                return None
            out[name] = value
            pos = stop + len(sep)
        return out


_DIGIT_FIELDS = ("budget_n", "replicate")


def compile_template(template: str) -> IdTemplate:
    """'{task_id}__{arm}__r{replicate}' -> the literals around each field (budget_n and replicate: digits).

    Args:
        template: The --id-template value.
    """
    parts = re.split(r"\{(\w+)\}", template)
    names: list[str] = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            continue
        if part not in ID_FIELDS:
            raise InputError(f"unknown field {{{part}}} (known: {', '.join(ID_FIELDS)})", field="id-template")
        if part in names:
            raise InputError(f"field {{{part}}} appears twice", field="id-template")
        names.append(part)
    if "task_id" not in names or not ({"arm", "strategy"} & set(names)):
        raise InputError("needs {task_id} and {arm} (or {strategy})", field="id-template")
    literals = tuple(parts[0::2])
    if any(not lit for lit in literals[1:-1]):
        raise InputError("two fields must be separated by some text (e.g. '__')", field="id-template")
    return IdTemplate(literals, tuple(names))


def identity(fields: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None, str]:
    """(task/arm identity, None, '') from mapping fields, or (None, bad field, message).

    Args:
        fields: A mapping row's fields.
    """
    task_id = fields.get("task_id")
    if not isinstance(task_id, str) or not task_id.strip():
        return None, "task_id", "required, a non-empty string"
    arm = fields.get("arm") or fields.get("strategy")
    if not isinstance(arm, str) or not arm.strip():
        return None, "arm", "required (or strategy + budget_n)"
    budget = fields.get("budget_n")
    if budget not in (None, "") and as_int(budget) is None:
        return None, "budget_n", "must be an integer >= 0"
    rep = fields.get("replicate")
    if rep not in (None, "") and as_int(rep) is None:
        return None, "replicate", "must be an integer >= 0"
    if fields.get("arm"):
        ident = arm_fields(arm.strip(), as_int(budget) if budget not in (None, "") else None)
    else:
        ident = arm_fields(arm.strip(), as_int(budget) if budget not in (None, "") else 1)
    ident.update(
        task_id=task_id.strip(),
        replicate=as_int(rep) if rep not in (None, "") else 0,
        role=str(fields.get("role") or "sample"),
    )
    if fields.get("family"):
        ident["family"] = str(fields["family"])
    return ident, None, ""


def load_mapping(mapping: str | None, input_file: str | None, col: Collector) -> dict[str, dict[str, Any]]:
    """custom_id -> identity from a mapping table and/or the batch input file (the mapping table wins).

    Args:
        mapping: The --mapping table (None: none).
        input_file: The batch input file (None: none).
        col: Where bad lines are raised or, with --skip-bad, collected.
    """
    out: dict[str, dict[str, Any]] = {}
    sources: list[tuple[str, list[tuple[int, dict[str, Any]]], bool]] = []
    if input_file:
        sources.append((input_file, list(read_jsonl(input_file, col)), True))
    if mapping:
        sources.append((mapping, read_rows(mapping, col), False))
    for file, rows, is_input in sources:
        seen: dict[str, int] = {}
        for line, row in rows:
            cid = row.get("custom_id")
            if not isinstance(cid, str) or not cid:
                col.bad(file, line, "custom_id", "required, a non-empty string")
                continue
            if cid in seen:
                col.bad(file, line, "custom_id", f"duplicate custom_id (first on line {seen[cid]})")
                continue
            seen[cid] = line
            if is_input:
                body = row.get("body")
                fields = body.get("metadata") if isinstance(body, dict) else None
                if not isinstance(fields, dict) or "task_id" not in fields:
                    continue  # this request carries no mapping; the template or mapping table may
                prefix = "body.metadata."
            else:
                fields, prefix = row, ""
            ident, bad_field, msg = identity(fields)
            if ident is None:
                col.bad(file, line, prefix + str(bad_field), msg)
                continue
            out[cid] = ident
    return out


def _usage(body: Any) -> tuple[dict[str, int] | None, str | None]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        return None, "response.body.usage"
    # /v1/chat/completions and /v1/completions report prompt/completion tokens; /v1/responses reports
    # input/output tokens; /v1/embeddings has prompt tokens only (no completion).
    names = (
        ("input_tokens", "output_tokens")
        if "input_tokens" in usage and "prompt_tokens" not in usage
        else ("prompt_tokens", "completion_tokens")
    )
    got = {}
    for ours, theirs in zip(("prompt_tokens", "completion_tokens"), names, strict=True):
        v = usage.get(
            theirs,
            0
            if theirs == "completion_tokens" and "total_tokens" in usage and "completion_tokens" not in usage
            else None,
        )
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return None, f"response.body.usage.{theirs}"
        got[ours] = v
    return got, None


def _identity_of(
    cid: str, known: dict[str, dict[str, Any]], template: IdTemplate | None
) -> tuple[dict[str, Any] | None, str]:
    """(task/arm identity, '') of a custom_id from the mapping, else from --id-template; (None, why) when
    neither gives one."""
    ident = known.get(cid)
    if ident is None and template is not None and (m := template.match(cid)):
        ident, bad_field, msg = identity(dict(m))
        if ident is None:
            return None, f"--id-template gives a bad {bad_field}: {msg}"
    if ident is None:
        return None, f"'{cid}' is not in the mapping" + (
            " and does not match --id-template" if template else ""
        )
    return ident, ""


def import_batch(
    outputs: Sequence[str],
    *,
    input_file: str | None = None,
    mapping: str | None = None,
    id_template: str | None = None,
    outcomes: str | None = None,
    skip_bad: bool = False,
) -> Collector:
    """Call records from Batch output files (+ outcome records from an outcomes file).

    Args:
        outputs: the Batch output files.
        input_file: the Batch input file (custom_id -> task and arm from its requests).
        mapping: the --mapping table (CSV or JSONL; wins over input_file).
        id_template: the --id-template custom_ids are parsed with.
        outcomes: the --outcomes file (CSV or JSONL scores).
        skip_bad: record bad lines and go on instead of stopping at the first.
    """
    if not (input_file or mapping or id_template):
        raise InputError(
            "say which task and arm each custom_id is: --mapping FILE, --input FILE "
            "(request body.metadata) or --id-template",
            field="mapping",
        )
    col = Collector(skip_bad=skip_bad)
    template = compile_template(id_template) if id_template else None
    known = load_mapping(mapping, input_file, col)
    by_cid: dict[str, dict[str, Any]] = {}
    failed = 0
    seen: dict[str, str] = {}
    for file in outputs:
        for line, obj in read_jsonl(file, col):
            cid = obj.get("custom_id")
            if not isinstance(cid, str) or not cid:
                col.bad(file, line, "custom_id", "required, a non-empty string")
                continue
            if cid in seen:
                col.bad(file, line, "custom_id", f"duplicate custom_id (first at {seen[cid]})")
                continue
            resp, err = obj.get("response"), obj.get("error")
            if err or not isinstance(resp, dict) or resp.get("status_code") != 200:
                if err is None and resp is not None and not isinstance(resp, dict):
                    col.bad(file, line, "response", "must be an object or null")
                    continue
                failed += 1  # not billed by OpenAI: no tokens to count, and it needs no mapping
                seen[cid] = f"{file}:{line}"
                continue
            ident, why = _identity_of(cid, known, template)
            if ident is None:
                col.bad(file, line, "custom_id", why)
                continue
            seen[cid] = f"{file}:{line}"
            body = resp.get("body")
            if not isinstance(body, dict):
                col.bad(file, line, "response.body", "a 200 response needs its body object")
                continue
            usage, bad_field = _usage(body)
            if bad_field:
                col.bad(file, line, bad_field, "must be an integer >= 0")
                continue
            rec = {
                "kind": "call",
                **ident,
                "usage": usage,
                "usage_missing": usage is None,
                "model": body.get("model"),
                "n_returned": len(body.get("choices") or []),
                "custom_id": cid,
                "source": f"{file}:{line}",
            }
            col.records.append(rec)
            by_cid[cid] = ident
    if failed:
        col.notes.append(f"{failed} failed request(s) in the output (not billed, no tokens) were left out")
    if outcomes:
        _outcomes(outcomes, {**known, **by_cid}, col, template)
    return col


def _outcomes(
    path: str, by_cid: dict[str, dict[str, Any]], col: Collector, template: IdTemplate | None = None
) -> None:
    seen: dict[tuple[str, str, int], int] = {}
    for line, row in read_rows(path, col):
        cid = row.get("custom_id")
        if cid not in (None, ""):
            ident = by_cid.get(str(cid))
            if ident is None and template is not None and (m := template.match(str(cid))):
                ident = identity(dict(m))[0]  # e.g. a request that failed: scored, but no tokens
            if ident is None:
                col.bad(path, line, "custom_id", f"'{cid}' is not a request of the batch")
                continue
        else:
            ident, bad_field, msg = identity(row)
            if ident is None:
                col.bad(path, line, bad_field, msg + " (or give custom_id)")
                continue
        score, bad_field = as_score(row)
        if bad_field:
            col.bad(path, line, bad_field, "needs score (a number in 0..1) or correct (true/false)")
            continue
        key = (ident["task_id"], ident["arm"], ident["replicate"])
        if key in seen:
            col.bad(
                path,
                line,
                "task_id",
                f"second outcome for task {key[0]}, arm {key[1]}, replicate {key[2]} "
                f"(first on line {seen[key]})",
            )
            continue
        seen[key] = line
        rec = {k: v for k, v in ident.items() if k != "role"}
        col.records.append({"kind": "outcome", **rec, "score": score, "source": f"{path}:{line}"})


def mapping_template(input_file: str, col: Collector) -> list[dict[str, Any]]:
    """Rows custom_id, task_id, arm, replicate, family — filled from body.metadata where present.

    Args:
        input_file: The batch input file.
        col: Where bad lines are raised or, with --skip-bad, collected.
    """
    rows = []
    for _, obj in read_jsonl(input_file, col):
        meta = (obj.get("body") or {}).get("metadata") or {} if isinstance(obj.get("body"), dict) else {}
        rows.append(
            {
                "custom_id": obj.get("custom_id", ""),
                **{k: str(meta.get(k, "")) for k in ("task_id", "arm", "replicate", "family")},
            }
        )
    return rows
