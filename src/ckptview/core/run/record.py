"""A run's records: dataclasses with a JSON form that are also read-only mappings over their JSON keys
(`core/run/result.py` defines them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any, ClassVar


class Record(Mapping[str, Any]):
    """A dataclass with a JSON form; fields named in `OMIT_NONE` are left out of it when None."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    def to_json(self) -> dict[str, Any]:
        """The record as JSON-able data, keys in field order."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.name in self.OMIT_NONE:
                continue
            out[f.name] = _plain(value)
        return out

    def __eq__(self, other: object) -> bool:
        """Equal to a record of the same type with the same values, or to its JSON form as a dict."""
        if isinstance(other, Record):
            return type(other) is type(self) and other.to_json() == self.to_json()
        if isinstance(other, Mapping):
            return bool(self.to_json() == _plain(dict(other)))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable records

    def _keys(self) -> list[str]:
        return [f.name for f in fields(self)  # type: ignore[arg-type]
                if not (f.name in self.OMIT_NONE and getattr(self, f.name) is None)]

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
