"""Typed settings checked by a model: a frozen dataclass declares each setting once (type, bounds, default) and
`checked(cls, data)` validates untrusted data (parsed TOML or JSON) against it with pydantic.

The dataclass is the declaration; its fields' annotations carry the bounds (`annotated_types`: Ge, Gt, Le, Lt,
Interval, MinLen, Predicate) and an optional `metadata={"must": "a number in 0..1"}` saying the rule in words for
error messages (`"secret": True`: the refused value is not shown; `"missing": "..."`: what a required field holds,
said when it is left out). The bound names resolve from annotated_types when a class is first checked, so a settings module
imports them under TYPE_CHECKING only (with `from __future__ import annotations`) and stays light to import. pydantic is imported here only, and this module only from inside loaders (plan, profile, simulator
and adaptive parsing): `ept tokens` and the analysis never pay its import (benchmarks/bench_startup.py).

Validation is strict (no "3" for 3, no true for 1), refuses unknown keys, NaN and infinities. The first problem
is raised as `ModelError`, naming the field by its path (`degrade.greedy@1`); callers add the file and line.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Annotated, Any, Literal, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

T = TypeVar("T")
_CONFIG = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
# Errors name the value they refuse, shortened: a hostile file may hold a megabyte string.
_MAX_SHOWN = 60
_MAX_WORD = 10


class ModelError(ValueError):
    """The first problem of some data against a settings dataclass: the field's path and what is wrong."""

    def __init__(self, path: tuple[str, ...], message: str, kind: str = "") -> None:
        # kind: pydantic's error type ("extra_forbidden", "missing", ...), for callers that word a case their way
        self.path, self.message, self.kind = path, message, kind
        super().__init__(f"{'.'.join(path)}: {message}" if path else message)

    @property
    def field(self) -> str:
        """The dotted path of the field (`degrade.greedy@1`), empty for the table itself."""
        return ".".join(self.path)

    @property
    def key(self) -> str | None:
        """The top-level key at fault (None: the whole table), for a line lookup in the file."""
        return self.path[0] if self.path else None


def known_fields(cls: type) -> list[str]:
    """The settings a dataclass declares, sorted (for 'unknown field (known: ...)' messages)."""
    return sorted(f.name for f in dataclasses.fields(cls))


@functools.cache
def _model(cls: type, omit: frozenset[str] = frozenset()) -> type[BaseModel]:
    """A pydantic model with the dataclass's fields (but `omit`), types and defaults (built once per class)."""
    names = {
        **{n: getattr(annotated_types, n) for n in annotated_types.__all__},
        "Annotated": Annotated,
        "Literal": Literal,
    }
    hints = typing.get_type_hints(cls, localns=names, include_extras=True)
    spec: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in omit:
            continue
        if f.default is not dataclasses.MISSING:
            spec[f.name] = (hints[f.name], Field(default=f.default))
        elif f.default_factory is not dataclasses.MISSING:
            spec[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            spec[f.name] = (hints[f.name], ...)
    model: type[BaseModel] = create_model(f"{cls.__name__}Model", __config__=_CONFIG, **spec)
    return model


def _shown(value: Any) -> str:
    """The refused value for an error message: numbers, booleans and words as written; a longer string, a list
    or a table described, not shown (it may hold a key pasted into the wrong field: errors carry no secrets)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= _MAX_WORD else f"a string of {len(value):,} characters"
    if isinstance(value, list | dict):
        return f"a {'list' if isinstance(value, list) else 'table'} of {len(value):,} item{'s' * (len(value) != 1)}"
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return "a number too long to show"
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _words(err: Any, cls: type, omit: frozenset[str]) -> str:
    """A pydantic error in the project's words ('must be ...', 'unknown field ...')."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"unknown field (known: {', '.join(k for k in known_fields(cls) if k not in omit)})"
    fields = {f.name: f for f in dataclasses.fields(cls)}
    top = fields.get(str(err["loc"][0])) if err["loc"] else None
    if kind == "missing":  # `metadata={"missing": "..."}`: what the field holds, said when it is left out
        hint = top.metadata.get("missing") if top is not None and len(err["loc"]) == 1 else None
        return f"missing required field ({hint})" if hint else "missing required field"
    # A secret's value is never shown (`metadata={"secret": True}`), nor anything under it.
    got = "" if top is not None and top.metadata.get("secret") else f", got {_shown(err['input'])}"
    if top is not None and "must" in top.metadata:
        return f"must be {top.metadata['must']}{got}"
    words = {
        "bool_type": "true or false",
        "int_type": "an integer",
        "float_type": "a number",
        "string_type": "a string",
        "finite_number": "a finite number",
        "list_type": "a list",
        "dict_type": "a table",
        "greater_than_equal": f">= {ctx.get('ge')}",
        "greater_than": f"> {ctx.get('gt')}",
        "less_than_equal": f"<= {ctx.get('le')}",
        "less_than": f"< {ctx.get('lt')}",
        "literal_error": f"one of {ctx.get('expected')}",
        "too_short": "non-empty",
    }
    if kind in words:
        return f"must be {words[kind]}{got}"
    return f"{str(err['msg']).lower()}{got}"


def checked(cls: type[T], data: Any) -> T:
    """`data` (a dict from TOML or JSON) as an instance of the settings dataclass `cls`; ModelError naming the
    first bad field. Missing keys take the dataclass's defaults."""
    return cls(**checked_fields(cls, data))


def checked_fields(cls: type, data: Any, omit: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The values of `data` checked against the fields of `cls` but `omit` (the fields a file does not set, e.g.
    a profile's name), defaults filled in; ModelError naming the first bad field."""
    if not isinstance(data, dict):
        raise ModelError((), f"must be a table, got {type(data).__name__}")
    try:
        model = _model(cls, omit).model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        path = _data_path(err, data)
        kind = str(err["type"])
        raise ModelError(path[:1] if _has_must(cls, path) else path, _words(err, cls, omit), kind) from None
    return {f.name: getattr(model, f.name) for f in dataclasses.fields(cls) if f.name not in omit}


def _has_must(cls: type, path: tuple[str, ...]) -> bool:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return bool(path) and path[0] in fields and "must" in fields[path[0]].metadata


def _data_path(err: Any, data: Any) -> tuple[str, ...]:
    """The error's location as keys of the data: a union's errors also name the member tried (`bool`,
    `literal['seen','warm']`) after the field's key, which is no key of the data and is left out."""
    if err["type"] == "missing":
        return tuple(str(p) for p in err["loc"])
    path: list[str] = []
    node = data
    for part in err["loc"]:
        in_dict = isinstance(node, dict) and part in node
        if in_dict or (isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)):
            path.append(str(part))
            node = node[part]
    return tuple(path)
