"""The egress streak that stops a sweep: successes that were already in flight must not reset it."""

from __future__ import annotations

from elo_per_token.coordinator.sweep_tally import EGRESS_ABORT_AFTER, Tally


def _failed(i: int, started: float, finished: float) -> dict:
    return {"key": f"f{i}", "status": "failed", "class": "credential", "message": "401",
            "started_at": started, "finished_at": finished}  # fmt: skip


def _done(i: int, started: float) -> dict:
    return {"key": f"d{i}", "status": "done", "started_at": started, "finished_at": started + 5}


def test_success_started_before_the_streak_does_not_reset_it():
    t = Tally(total=100)
    for i in range(EGRESS_ABORT_AFTER - 1):
        t.add(_failed(i, started=10.0 + i, finished=20.0 + i))
    t.add(_done(0, started=5.0))  # in flight when the key was revoked: proves nothing about the key now
    assert t.egress_streak == EGRESS_ABORT_AFTER - 1 and not t.egress_broken()
    t.add(_failed(99, started=30.0, finished=40.0))
    assert t.egress_broken()


def test_success_started_after_the_streak_began_resets_it():
    t = Tally(total=100)
    for i in range(3):
        t.add(_failed(i, started=10.0, finished=20.0 + i))
    t.add(_done(0, started=25.0))  # its requests went out after the first failure: egress works again
    assert t.egress_streak == 0 and t.streak_since is None
    t.add(_failed(7, started=30.0, finished=31.0))
    assert t.egress_streak == 1 and t.streak_since == 31.0


def test_summaries_without_times_keep_the_old_rule():
    t = Tally(total=10)
    t.add({"key": "a", "status": "failed", "class": "endpoint", "message": "404"})
    t.add({"key": "b", "status": "done"})  # no started_at: treated as started after, resets
    assert t.egress_streak == 0
