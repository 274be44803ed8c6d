"""The retry policy of every storage request: exponential backoff with full jitter, and outage patience."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from elo_per_token.common.backoff import backoff

T = TypeVar("T")


def retrying(
    fn: Callable[[], T],
    *,
    attempts: int = 6,
    base_s: float = 0.2,
    cap_s: float = 5.0,
    patience_s: float = 0.0,
) -> T:
    """Call fn, retrying connection-level failures with exponential backoff and full jitter.

    After `attempts` tries, an outage (connection errors, 5xx) is retried until `patience_s` seconds have passed
    since the first try: a worker that gives up on a short S3 outage loses a job whose tokens are already spent.

    Args:
        fn: The call to make (no arguments).
        attempts: Tries before an outage starts counting against `patience_s`.
        base_s: The first backoff's upper bound in seconds (doubling each try).
        cap_s: The longest single backoff in seconds.
        patience_s: How long an outage (connection errors, 5xx) is ridden out after `attempts` tries; 0: give
            up then.
    """
    from botocore.exceptions import ClientError, ConnectionClosedError, ConnectionError, ReadTimeoutError

    start = time.monotonic()
    i = 0
    while True:
        try:
            return fn()
        except (ConnectionError, ConnectionClosedError, ReadTimeoutError) as e:
            err: Exception = e
            outage = True
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            # 409 = a concurrent conditional write is in flight: retry to learn who won.
            if status < 500 and status not in (409, 429) and code not in ("SlowDown", "RequestTimeout"):
                raise
            err = e
            outage = status >= 500  # a server restarting; 409/429 are answers, not outages
        i += 1
        left = patience_s - (time.monotonic() - start)
        if i >= attempts and (not outage or left <= 0):
            raise err
        pause = backoff(i, base_s, cap_s)
        # Past the attempts, an outage is retried only within the patience: never sleep beyond it.
        time.sleep(min(pause, left) if i >= attempts else pause)
