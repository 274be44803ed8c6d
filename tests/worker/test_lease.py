"""The broker lease of a job outlives its longest wait (issue 26 item 2): a grading wait longer than the
visibility timeout redelivered code jobs again and again, each copy paying for its calls."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elo_per_token.contracts.errors import InputError
from elo_per_token.worker.celery_app import LEASE_MARGIN_S, grade_timeout_s, lease_seconds, make_app


def test_default_lease_covers_the_grading_wait():
    assert lease_seconds({}) == 50  # no grade queue: jobs wait only on the provider
    assert lease_seconds({"EPT_GRADE_QUEUE": "grade"}) == 120 + LEASE_MARGIN_S
    assert lease_seconds({"EPT_GRADE_QUEUE": "grade", "EPT_GRADE_TIMEOUT": "300"}) == 300 + LEASE_MARGIN_S
    assert (
        lease_seconds(
            {"EPT_GRADE_QUEUE": "grade", "EPT_GRADE_TIMEOUT": "300", "EPT_VISIBILITY_TIMEOUT": "400"}
        )
        == 400
    )


def test_a_lease_shorter_than_the_grading_wait_is_refused_naming_both_settings():
    # The compose defaults: 300 s grading wait under a 50 s lease.
    env = {"EPT_GRADE_QUEUE": "grade", "EPT_GRADE_TIMEOUT": "300", "EPT_VISIBILITY_TIMEOUT": "50"}
    with pytest.raises(InputError) as e:
        lease_seconds(env)
    assert (
        e.value.field == "EPT_VISIBILITY_TIMEOUT"
        and "EPT_GRADE_TIMEOUT" in e.value.message
        and "360" in e.value.message
    )


def test_make_app_refuses_an_inconsistent_setting(monkeypatch):
    monkeypatch.setenv("EPT_GRADE_QUEUE", "grade")
    monkeypatch.setenv("EPT_GRADE_TIMEOUT", "300")
    monkeypatch.setenv("EPT_VISIBILITY_TIMEOUT", "50")
    with pytest.raises(InputError):
        make_app("redis://127.0.0.1:1/0")
    monkeypatch.setenv("EPT_VISIBILITY_TIMEOUT", "360")
    app = make_app("redis://127.0.0.1:1/0")
    assert app.conf.broker_transport_options["visibility_timeout"] == 360


@settings(max_examples=300, deadline=None, derandomize=True)
@given(grade=st.text(max_size=30), vt=st.text(max_size=30), queue=st.sampled_from(["", "grade"]))
def test_any_setting_gives_a_consistent_lease_or_a_named_error(grade, vt, queue):
    env = {"EPT_GRADE_QUEUE": queue, "EPT_GRADE_TIMEOUT": grade, "EPT_VISIBILITY_TIMEOUT": vt}
    try:
        lease = lease_seconds(env)
    except InputError as e:
        assert e.field in ("EPT_GRADE_TIMEOUT", "EPT_VISIBILITY_TIMEOUT")
        return
    assert lease >= 1
    if queue:
        assert lease >= grade_timeout_s(env) + LEASE_MARGIN_S
