"""A job's transcript page: every call with its usage, latency and finish reason (from the job object), its
messages, reasoning, completion and tool traffic (from the stored transcript, when the run kept one), then
the grader's verdict and evidence. All of it is untrusted model or tool output: escaped, shown as text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from elo_per_token.viewer.pages import e, pretty, run_url, shell


def _usage(c: Mapping[str, Any]) -> dict[str, Any]:
    u = c.get("usage") or {}
    details = u.get("completion_tokens_details") or {}
    cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
    return {
        "prompt": u.get("prompt_tokens"),
        "completion": u.get("completion_tokens"),
        "reasoning": details.get("reasoning_tokens"),
        "cached": cached,
    }


MAX_CALL_ROWS = 2000  # calls drawn in one job's table; the page says how many more there were


def _calls_table(calls: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for c in calls[:MAX_CALL_ROWS]:
        u = _usage(c)
        err = (c.get("error") or {}).get("class") if isinstance(c.get("error"), dict) else None
        cells = [
            c.get("call_index"),
            c.get("role"),
            c.get("model"),
            u["prompt"],
            u["completion"],
            u["reasoning"],
            u["cached"],
            f"{c['latency_s']:.2f}" if isinstance(c.get("latency_s"), int | float) else None,
            c.get("finish_reason"),
            err,
        ]
        rows.append("<tr>" + "".join(f"<td>{e('—' if x is None else str(x))}</td>" for x in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "call",
            "role",
            "model",
            "prompt",
            "completion",
            "reasoning",
            "cached",
            "latency s",
            "finish",
            "error",
        )
    )
    more = (
        f'<p class="muted" id="calls-clipped">the first {MAX_CALL_ROWS:,} of {len(calls):,} calls shown</p>'
        if len(calls) > MAX_CALL_ROWS
        else ""
    )
    return (
        f'<div class="scroll"><table id="calls-table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
        f"</table></div>{more}"
    )


def _block(label: str, text: Any, cls: str) -> str:
    if text in (None, "", [], {}):
        return ""
    return f'<div class="{cls}"><div class="lbl">{e(label)}</div><pre>{pretty(text)}</pre></div>'


def _transcript_calls(t: Mapping[str, Any]) -> list[str]:
    out = []
    for c in t.get("calls") or []:
        parts = [
            f'<section class="call" data-call="{e(str(c.get("call_index")), quote=True)}">'
            f"<h3>call {e(str(c.get('call_index')))} · {e(str(c.get('role') or ''))}</h3>"
        ]
        for m in c.get("messages") or []:
            if isinstance(m, Mapping):
                parts.append(_block(str(m.get("role") or "message"), m.get("content"), "msg"))
        parts.append(_block("reasoning", c.get("reasoning"), "reasoning"))
        parts.append(_block("completion", c.get("completion"), "completion"))
        parts.append(_block("tool calls", c.get("tool_calls"), "tool"))
        parts.append(_block("tool results", c.get("tool_results"), "tool"))
        out.append("".join(parts) + "</section>")
    return out


def _grader(outcome: Mapping[str, Any] | None, t: Mapping[str, Any] | None) -> list[str]:
    """The verdict, the final answer, the grader's details and evidence, each failed assert shown once: the
    transcript's evidence and the outcome's grader details may both hold the failures (and the transcript's
    verdict repeats the outcome's), so each is shown from one place only."""
    out = ['<section id="grader"><h2>Grader</h2>']
    g = (t or {}).get("grader") or {}
    ev: Mapping[str, Any] = g["evidence"] if isinstance(g.get("evidence"), Mapping) else {}
    details = outcome.get("grader") if outcome else None
    failures = list(ev.get("failures") or []) or (
        list(details.get("failures") or []) if isinstance(details, Mapping) else []
    )
    if isinstance(details, Mapping):
        details = {k: v for k, v in details.items() if k != "failures"}
    if outcome:
        score = outcome.get("score")
        out.append(
            f'<p id="verdict" data-score="{e(str(score), quote=True)}">score {e(str(score))}'
            f"{' · correct' if outcome.get('correct') else ' · not correct' if outcome.get('correct') is False else ''}</p>"
        )
        out.append(_block("final answer", outcome.get("answer"), "answer"))
        out.append(_block("grader details", details, "evidence"))
        out.append(_block("error", outcome.get("error"), "evidence"))
        out.append(_block("failure", outcome.get("failure"), "evidence"))
    else:  # no outcome record read: the transcript's copy of the verdict is all there is
        out.append(_block("verdict (transcript)", g.get("verdict"), "evidence"))
    out += [_failed(f) for f in failures if isinstance(f, Mapping)]
    out += _evidence(g.get("evidence"))
    out.append("</section>")
    return out


def _failed(f: Mapping[str, Any]) -> str:
    return _block("failed assert", f"{f.get('error')}\n\nin test:\n{f.get('test')}", "failed-assert")


def _evidence(ev: Any) -> list[str]:
    """The grader's evidence beyond the failed asserts (shown by _grader): the sandbox's output (what the
    candidate printed) as a text block of its own, the rest as one JSON block."""
    if not isinstance(ev, Mapping):
        return [_block("evidence (transcript)", ev, "evidence")]
    out = []
    if "sandbox_output" in ev:  # a code grading: say so when the candidate printed nothing
        out.append(
            _block(
                "sandbox output (printed by the candidate; untrusted)",
                ev["sandbox_output"] or "(nothing printed)",
                "sandbox-output",
            )
        )
    rest = {k: v for k, v in ev.items() if k not in ("sandbox_output", "failures")}
    out.append(_block("evidence (transcript)", rest, "evidence"))
    return out


def job_page(
    run_id: str,
    key: str,
    records: Sequence[Mapping[str, Any]],
    transcript: Mapping[str, Any] | None,
    notes: Sequence[str] = (),
) -> str:
    """The job's calls, transcript and grader; `notes` say what of the job object was not read or not shown."""
    calls = [r for r in records if r.get("kind") == "call"]
    outcome = next((r for r in records if r.get("kind") == "outcome"), None)
    head = outcome or (calls[0] if calls else {})
    title = f"{head.get('arm', '?')} on {head.get('task_id', '?')} (replicate {head.get('replicate', 0)})"
    body = [f'<p class="muted">job {e(key)} · {len(calls)} calls</p>']
    body += [f'<p class="warn job-note">{e(n)}</p>' for n in notes]
    body += ["<h2>Calls</h2>", _calls_table(calls)]
    if transcript is None:
        body.append(
            '<p class="muted" id="no-transcript">No transcript stored for this job (the run was made with '
            "<code>transcripts = false</code>, or before transcripts existed).</p>"
        )
    else:
        if transcript.get("error"):
            body.append(f'<p class="warn">transcript {e(str(transcript["error"]))}</p>')
        if transcript.get("truncated"):
            body.append(
                '<p class="muted">Some texts were cut to the per-call bound; the cut is marked in place.</p>'
            )
        body += ['<h2>Transcript</h2><div id="transcript">', *_transcript_calls(transcript), "</div>"]
    body += _grader(outcome, transcript)
    task, arm = str(head.get("task_id", "")), str(head.get("arm", ""))
    crumbs = [(run_id, run_url(run_id))]
    if arm:
        crumbs.append((arm, run_url(run_id, "arm", arm=arm)))
    crumbs += [
        (task, run_url(run_id, "task", task=task, arm=arm or None)),
        ("job", run_url(run_id, "job", key=key)),
    ]
    return shell(title, body, crumbs=crumbs)
