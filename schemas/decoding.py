"""Spec-driven decoding: a dataclass's annotations are its field spec.

Each event class is a frozen dataclass; its type hints say what a field holds and its
default says whether the field is optional. `decode_object` walks a parsed JSON mapping
against that spec and raises `ContractError` naming the exact field path on the first
problem, so dead-lettered events carry a reason an operator can act on.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from schemas.bounds import MAX_ID_CHARS, int_range, max_chars
from schemas.errors import ContractError

T = TypeVar("T")

MAX_KEY_CHARS = MAX_ID_CHARS  # object keys (domain names, evidence and shape keys) are identifiers


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


@cache
def _field_table(cls: type) -> tuple[tuple[str, bool], ...]:
    """(name, required) for every init field of `cls`."""
    return tuple(
        (f.name, f.default is MISSING and f.default_factory is MISSING)
        for f in fields(cls)
        if f.init
    )


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def convert(value: Any, tp: Any, path: str, strict: bool, name: str = "") -> Any:
    """Check `value` against type `tp`, returning the typed value.

    `name` is the field's name: integers and strings are bounded by it (`schemas.bounds`),
    list items and dict values by the name of the field that holds them.
    """
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ContractError(path, "must not be null")
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return convert(value, non_none[0], path, strict, name)
        raise TypeError(f"unsupported union {tp} at {path}")  # pragma: no cover - spec bug
    if value is None:
        raise ContractError(path, "must not be null")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            raise ContractError(path, f"must be one of {choices}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ContractError(path, f"must be a list, got {type(value).__name__}")
        (item_tp,) = get_args(tp)
        return [convert(v, item_tp, f"{path}[{i}]", strict, name) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ContractError(path, f"must be an object, got {type(value).__name__}")
        key_tp, val_tp = get_args(tp)
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if key_tp is not str or not isinstance(k, str):  # JSON keys are always str
                raise ContractError(path, f"key {k!r} must be a string")
            if not k or len(k) > MAX_KEY_CHARS:
                raise ContractError(path, f"keys must have 1 to {MAX_KEY_CHARS} characters, got {len(k)}")
            out[k] = convert(v, val_tp, f"{path}.{k}", strict, name)
        return out
    if tp is bool:
        if not isinstance(value, bool):
            raise ContractError(path, f"must be true or false, got {type(value).__name__}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ContractError(path, f"must be an integer, got {type(value).__name__}")
        low, high = int_range(name)
        if not low <= value <= high:
            raise ContractError(path, f"must be in [{low}, {high}] (the range its column stores)")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ContractError(path, f"must be a number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ContractError(path, "must be finite")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ContractError(path, f"must be a string, got {type(value).__name__}")
        limit = max_chars(name)
        if len(value) > limit:
            raise ContractError(path, f"has {len(value)} characters, at most {limit}")
        return value
    if isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ContractError(path, f"must be an object, got {type(value).__name__}")
        return decode_object(tp, value, strict, path)
    raise TypeError(f"unsupported field type {_type_name(tp)} at {path}")  # pragma: no cover


def decode_object(cls: type[T], data: Mapping[str, Any], strict: bool, path: str = "") -> T:
    """Build `cls` from `data`; `strict` rejects fields the spec does not know."""
    hints = _hints(cls)  # type: ignore[arg-type]
    table = _field_table(cls)  # type: ignore[arg-type]
    known = {name for name, _ in table}
    prefix = f"{path}." if path else ""
    if strict:
        for key in data:
            if key not in known and not (path == "" and key in ("type", "v")):
                shown = key if key else '""'
                raise ContractError(f"{prefix}{shown}", "unknown field for this contract version")
    kwargs: dict[str, Any] = {}
    for name, required in table:
        if name not in data:
            if required:
                raise ContractError(f"{prefix}{name}", "is required")
            continue
        kwargs[name] = convert(data[name], hints[name], f"{prefix}{name}", strict, name)
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        check(path)
    return obj


def require(condition: bool, path: str, problem: str) -> None:
    """Raise a ContractError for a semantic rule (ranges, orderings) when `condition` fails."""
    if not condition:
        raise ContractError(path, problem)


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
