"""The Celery result entry of an `ept.run_job` message, stored by the job itself (worker.celery_job)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elo_per_token.contracts.jobs import JobSummary


class TaskResult:
    """The Celery result entry of a finished `ept.run_job` message, written by the worker itself in the round
    trip that releases the job's claim instead of by Celery after the task returns (the task then ignores its
    result: `make_app`). Celery's Redis backend costs two more round trips per job for the same entry (a GET,
    then SETEX + PUBLISH); this is one EVAL in a pipeline the job sends anyway. The entry is Celery's own:
    the meta its backend writes, encoded by that backend, under its key, with its expiry, published to its
    subscribers; and as Celery does, an entry that already says SUCCESS (an earlier delivery's) is kept."""

    # Celery's _store_result reads the entry first and keeps a SUCCESS; a value that is not Celery's JSON
    # (anything with the broker's password can write one) is replaced, as a result must be readable.
    _STORE = """
local cur = redis.pcall('GET', KEYS[1])
if type(cur) == 'string' then
  local ok, meta = pcall(cjson.decode, cur)
  if ok and type(meta) == 'table' and meta['status'] == 'SUCCESS' then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
"""

    def __init__(self, backend: Any, task_id: str, summary: JobSummary) -> None:
        from datetime import UTC, datetime

        self.backend, self.task_id, self.summary = backend, task_id, summary
        meta: dict[str, Any] = {
            "status": "SUCCESS",
            "result": summary,
            "traceback": None,
            "children": [],
            "date_done": datetime.now(UTC).isoformat(),
            "task_id": task_id,
        }
        self.key, self.value = backend.get_key_for_task(task_id), backend.encode(meta)

    def queue(self, pipe: Any) -> None:
        """Add the store to a Redis pipeline (its value: 1 stored, 0 an earlier SUCCESS kept)."""
        pipe.eval(self._STORE, 1, self.key, self.value, int(self.backend.expires or 86400))

    def store_by_celery(self) -> None:
        """The entry stored the usual way, by Celery's backend (its retries included): when the round trip
        that should have carried it failed."""
        self.backend.store_result(self.task_id, self.summary, "SUCCESS")
