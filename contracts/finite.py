"""JSON for the write-once ledger: never a NaN or Infinity token.

`json.dumps` writes `NaN` / `Infinity` by default: not JSON, and once in a write-once job object they make
`ept analyze` refuse the whole run, permanently. Provider fields are validated before they are stored
(egress.proto_common, by the protocol adapters); what is left — a grader's informational details (`"got": inf` for a
400-digit answer) — is written as a string ("inf", "nan") instead of failing the job or the sweep.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _finite(v: Any, depth: int = 0) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)  # 'inf', '-inf', 'nan'
    if depth > 200:  # json.dumps itself refuses deeper structures (RecursionError) long before this matters
        return v
    if isinstance(v, dict):
        return {k: _finite(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x, depth + 1) for x in v]
    return v


def dumps_finite(obj: Any, **kw: Any) -> str:
    """json.dumps with allow_nan=False; a non-finite float anywhere is written as its string instead.

    Args:
        obj: The value to encode.
        **kw: json.dumps options (indent, sort_keys, ...).
    """
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:
        return json.dumps(_finite(obj), allow_nan=False, **kw)
