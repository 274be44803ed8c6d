"""The Celery task names the broker sees are part of the wire: renaming the worker's modules must not change them.

A coordinator sends `ept.run_job` by name (coordinator.celery_exec.TASK_NAME) and a job worker sends
`ept.grade_code` to the grade queue; a worker that registered them under other names would leave every message
unconsumed (or, mixed with older workers, consumed by only some of them).
"""

from __future__ import annotations

from elo_per_token.coordinator.celery_batches import BATCH_TASK
from elo_per_token.coordinator.celery_exec import TASK_NAME
from elo_per_token.worker import celery_job, lifecycle
from elo_per_token.worker.celery_app import make_app

WIRE_NAMES = {"ept.run_job", "ept.run_jobs", "ept.grade_code"}


def test_the_app_registers_exactly_the_wire_names():
    app = make_app("redis://127.0.0.1:1/0")  # building the app opens no connection
    ours = {name for name in app.tasks if not name.startswith("celery.")}
    assert ours == WIRE_NAMES
    assert BATCH_TASK in ours  # what the coordinator sends several jobs as


def test_the_coordinator_sends_the_name_the_worker_registers(monkeypatch):
    app = make_app("redis://127.0.0.1:1/0", profiles="/srv/worker-profiles.toml")
    assert TASK_NAME == "ept.run_job" == lifecycle.TASK_NAME
    # The task under that name runs worker.celery_job.celery_run_job (imported at call time, so the renamed
    # module is what a worker loads), with the message's two arguments as they came and the worker's own
    # profiles file (`ept worker --profiles`) as a value, not through the environment.
    seen = []
    monkeypatch.setattr(
        celery_job,
        "celery_run_job",
        lambda task_self, job, ctx, profiles, limits, results: (
            seen.append((job, ctx, profiles, limits, results)) or "ok"
        ),
    )
    monkeypatch.delenv("EPT_GRADE_QUEUE", raising=False)
    assert app.tasks[TASK_NAME]({"key": "k"}, {"ledger": "l"}) == "ok"
    # ... and the JobSettings (rate-limit store, allow-lists) read when the app was built; the claims live on
    # the broker, which is also the result backend: the job stores its result entry itself.
    limits = celery_job.JobSettings.from_env()
    assert seen == [({"key": "k"}, {"ledger": "l"}, "/srv/worker-profiles.toml", limits, True)]
    assert app.tasks[TASK_NAME].ignore_result is True
