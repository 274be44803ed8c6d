"""The sample explorer (/run/<id>/samples) over real HTTP against a real `ept view` process, on a generated
2,000-job run with a transcript per job (testkit/fixtures_samples.py): its rows, sort, filters, search and pages
checked against the job objects read directly (json, line by line: an oracle independent of the viewer's
polars), and hostile query strings answered 2xx/4xx, never 5xx, in bounded time and memory (issue 40)."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import fixtures_samples
import pytest
from bounds import bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from view_server import View, request, view

N_JOBS = 2000

pytestmark = pytest.mark.slow  # a 2,000-job run and 80 hostile requests: ~40 s


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("samples")
    fixtures_samples.write_run(root, "big", N_JOBS)
    return root


@pytest.fixture(scope="module")
def oracle(ledger: Path) -> dict[str, dict]:
    """job key -> its row, from the job objects themselves."""
    out = {}
    for p in (ledger / "runs" / "big" / "jobs").rglob("*.jsonl"):
        recs = [json.loads(x) for x in p.read_text().splitlines()]
        o = next(r for r in recs if r["kind"] == "outcome")
        calls = [r for r in recs if r["kind"] == "call"]
        out[o["job_key"]] = {
            "family": o["family"], "arm": o["arm"], "task_id": o["task_id"], "replicate": o["replicate"],
            "score": o["score"], "answer": o["answer"], "latency_s": sum(c["latency_s"] for c in calls),
            "tokens": sum(c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"] for c in calls),
        }  # fmt: skip
    assert len(out) == N_JOBS
    return out


@pytest.fixture(scope="module")
def served(ledger: Path) -> Iterator[View]:
    with view(ledger) as v:
        assert request(v.port, "/run/big/samples").status == 200  # the analysis and the frame, made once
        yield v


def _get(v: View, **params: object) -> tuple[int, str]:
    r = request(v.port, "/run/big/samples" + ("?" + urlencode(params) if params else ""))
    return r.status, r.body.decode()


def _keys(body: str) -> list[str]:
    return [
        html.unescape(k)
        for k in re.findall(r'<tr data-arm="[^"]*" data-task="[^"]*" data-key="([^"]*)"', body)
    ]


def _total(body: str) -> int:
    m = re.search(r'id="samples-count" data-total="(\d+)"', body)
    assert m, body[:500]
    return int(m.group(1))


def test_every_job_is_a_row_with_its_numbers(served: View, oracle: dict) -> None:
    status, body = _get(served)
    assert status == 200 and _total(body) == N_JOBS
    keys = _keys(body)
    assert len(keys) == 500  # the viewer's page size
    row = re.search(
        r'data-key="' + re.escape(html.escape(keys[0], quote=True)) + r'">(.*?)</tr>', body
    ).group(1)
    values = [float(x) for x in re.findall(r'data-value="([0-9.e+-]+)"', row)]
    want = oracle[keys[0]]
    assert values[0] == want["score"] and values[1] == want["tokens"]
    assert values[2] == pytest.approx(want["latency_s"])  # no prices: the cost cell has no number
    assert html.escape(want["answer"]) in row
    assert f'href="/run/big/job?key={quote(keys[0], safe="")}"' in row


def test_sort_by_any_column_both_ways(served: View, oracle: dict) -> None:
    for col in ("tokens", "latency_s", "score", "arm", "answer"):
        for desc in (False, True):
            status, body = _get(served, sort=col, desc=int(desc))
            assert status == 200
            got = [oracle[k][col] for k in _keys(body)]
            assert got == sorted(got, reverse=desc), (col, desc)
            # the first page of the sort holds the extreme values of the whole run
            extreme = (max if desc else min)(r[col] for r in oracle.values())
            assert got[0] == extreme, (col, desc)


def test_filters_match_the_job_objects(served: View, oracle: dict) -> None:
    arm = "majority@8"
    status, body = _get(served, family="code", arm=arm, smax=0.5)
    want = {k for k, r in oracle.items() if r["family"] == "code" and r["arm"] == arm and r["score"] <= 0.5}
    assert status == 200 and _total(body) == len(want) > 0
    assert set(_keys(body)) == want
    # "arms disagree": tasks whose arms' mean scores are not all equal
    means: dict[tuple[str, str], list[float]] = {}
    for r in oracle.values():
        means.setdefault((r["task_id"], r["arm"]), []).append(r["score"])
    spread: dict[str, set[float]] = {}
    for (task, _), s in means.items():
        spread.setdefault(task, set()).add(sum(s) / len(s))
    disagree = {k for k, r in oracle.items() if len(spread[r["task_id"]]) > 1}
    status, body = _get(served, disagree=1, smin=1)
    assert _total(body) == len({k for k in disagree if oracle[k]["score"] >= 1}) > 0
    # the form's filter is in the URL: the sort links keep it (deep links)
    assert "family=code" in html.unescape(re.search(r'data-col="tokens"><a class="sort" href="([^"]+)"', _get(
        served, family="code")[1]).group(1))  # fmt: skip


def test_search_finds_text_in_transcripts_and_answers(served: View, oracle: dict) -> None:
    frame = fixtures_samples.fixtures_ledger.job_frame("big", N_JOBS)
    idx = dict(zip(frame["job_key"].to_list(), frame["idx"].to_list(), strict=True))
    want = {k for k in oracle if f"needle-{idx[k] % 97} " == "needle-5 "}  # the completion's word, exactly
    for term in ("needle-5 ", "NEEDLE-5 "):  # case-insensitive
        status, body = _get(served, q=term)
        assert status == 200 and set(_keys(body)) == want and _total(body) == len(want), term
        assert "transcripts of 2,000" in body
    # in the final answers too ("true"/"false" in the fixtures), and literal: no pattern syntax
    assert _total(_get(served, q="TRUE")[1]) == sum(r["answer"] == "true" for r in oracle.values())
    for term in (".*", "needle-[0-9]", "(", "\\"):
        status, body = _get(served, q=term)
        assert status == 200 and _total(body) == 0, term


def test_search_stops_at_its_byte_bound(ledger: Path) -> None:
    """The scan stops after max_bytes of transcript text (the rows after it are searched in their answers only)
    and says so."""
    from elo_per_token.viewer import samples
    from elo_per_token.viewer.store import Store

    store = Store(str(ledger))
    frame = store.samples("big").samples
    rows, scanned, capped = samples.search(frame, "needle", lambda k: store.text("big", k), max_bytes=20_000)
    assert capped and 0 < scanned < frame.height
    assert rows.height == scanned  # every scanned transcript holds "needle"; no answer does
    _, scanned_all, capped_all = samples.search(frame, "needle", lambda k: store.text("big", k))
    assert scanned_all == frame.height and not capped_all


def test_pages(served: View) -> None:
    seen = []
    for page in (1, 2, 3, 4):
        status, body = _get(served, sort="tokens", page=page)
        assert status == 200
        seen += _keys(body)
    assert len(seen) == len(set(seen)) == N_JOBS
    assert _get(served, page=5)[0] == 404
    for bad in ({"page": 0}, {"page": -1}, {"page": "x"}, {"sort": "nope"}, {"smin": "nan"}, {"smax": "1e999"},
                {"desc": "2"}, {"q": "x" * 201}):  # fmt: skip
        status, body = _get(served, **bad)
        assert status == 400 and 'id="error"' in body, bad


_TEXT = st.text(max_size=300)
_PARAM = st.sampled_from(
    ["family", "arm", "smin", "smax", "error", "disagree", "q", "sort", "desc", "page", "x"]
)
_VALUE = st.one_of(
    _TEXT,
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        ["tokens", "answer", "(any)", "(none)", "majority@8", "code", ".*", "[", "\\", "%", "%00"]
    ),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=st.lists(st.tuples(_PARAM, _VALUE), max_size=12), raw=st.booleans())
def test_hostile_query_strings_never_5xx(served: View, params: list[tuple[str, str]], raw: bool) -> None:
    """Any sort key, filter, search term and page number (huge, negative, unicode, regex metacharacters,
    repeated, percent-garbage): 2xx or 4xx, never a 5xx, each request bounded in time and memory."""
    query = urlencode(params) if not raw else "&".join(f"{k}={v}" for k, v in params)
    target = "/run/big/samples?" + quote(query, safe="=&%+")
    before = served.kib("VmRSS")
    t0 = time.monotonic()
    r = bounded(lambda: request(served.port, target, timeout=30), time_s=5, memory_mb=64)
    assert time.monotonic() - t0 < 10, target
    assert 200 <= r.status < 500, (r.status, target, r.body[:300])
    assert (served.kib("VmRSS") - before) / 1024 < 100
