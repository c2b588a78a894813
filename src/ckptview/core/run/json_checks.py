"""Reading JSON another process sent, checked: the expected type, or a `ProtocolError` that says where."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_OUTPUTS = 1000  # outputs described in a result (a model may return a million tensors)
MAX_TEXT = 100_000  # characters of one string the parent keeps from the worker (a key name, a traceback)
MAX_ITEMS = 10_000_000  # entries of one list (key names of the largest models fit many times over)


class ProtocolError(ValueError):
    """What the worker sent does not have the shape of a result; the message says where."""


def get_obj(data: Any, where: str) -> Mapping[str, Any]:
    """`data` as a JSON object."""
    if not isinstance(data, Mapping):
        raise ProtocolError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def get_str(data: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    """A string (cut to MAX_TEXT)."""
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ProtocolError(f"{where}.{key}: expected a string")
    return value[:MAX_TEXT]


def get_opt_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    """A string or None."""
    return None if data.get(key) is None else get_str(data, key, where)


def get_int(data: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    """An integer (not a bool)."""
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{where}.{key}: expected an integer")
    return value


def get_opt_int(data: Mapping[str, Any], key: str, where: str) -> int | None:
    """An integer or None."""
    return None if data.get(key) is None else get_int(data, key, where)


def get_num(data: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    """A number, kept as sent (an int stays an int, so printing it again gives the same text)."""
    value = data.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ProtocolError(f"{where}.{key}: expected a number")
    return value


def get_opt_num(data: Mapping[str, Any], key: str, where: str) -> float | None:
    """A number or None."""
    return None if data.get(key) is None else get_num(data, key, where)


def get_list(data: Mapping[str, Any], key: str, where: str, limit: int = MAX_ITEMS) -> list[Any]:
    """A list, cut to `limit` entries."""
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ProtocolError(f"{where}.{key}: expected a list")
    return value[:limit]


def get_strs(data: Mapping[str, Any], key: str, where: str) -> list[str]:
    """A list of strings."""
    items = get_list(data, key, where)
    if not all(isinstance(s, str) for s in items):
        raise ProtocolError(f"{where}.{key}: expected a list of strings")
    return [s[:MAX_TEXT] for s in items]


def get_ints(data: Mapping[str, Any], key: str, where: str) -> list[int]:
    """A list of integers (a shape)."""
    items = get_list(data, key, where, limit=64)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in items):
        raise ProtocolError(f"{where}.{key}: expected a list of integers")
    return items


def get_scalars(data: Mapping[str, Any], key: str, where: str) -> list[Any] | None:
    """A list of numbers or strings (first values), or None."""
    if data.get(key) is None:
        return None
    items = get_list(data, key, where, limit=MAX_OUTPUTS)
    if not all(isinstance(v, (int, float, str, bool)) for v in items):
        raise ProtocolError(f"{where}.{key}: expected a list of numbers")
    return items
