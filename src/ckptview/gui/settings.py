"""The few settings the window keeps between runs, typed, over QSettings."""

from __future__ import annotations

import os

from PySide6.QtCore import QByteArray, QSettings

MAX_RECENT = 12


class Settings:
    """Recent files, window geometry/state and splitter sizes; `path` gives tests their own ini file."""

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            self._qs = QSettings("ckptview", "ckptview")
        else:
            self._qs = QSettings(path, QSettings.Format.IniFormat)

    def recent_files(self) -> list[str]:
        """Most recent first."""
        value = self._qs.value("recent_files", [])
        if isinstance(value, str):  # QSettings returns a bare string for a one-item list in ini files
            value = [value]
        return [str(v) for v in (value or [])]

    def add_recent(self, path: str) -> None:
        """Put `path` first in the recent list."""
        if "://" not in path:  # a URL stays as it is (shown form: no credentials)
            path = os.path.abspath(path)
        files = [path] + [p for p in self.recent_files() if p != path]
        self._qs.setValue("recent_files", files[:MAX_RECENT])
        self._qs.sync()

    def clear_recent(self) -> None:
        """Forget every recent file."""
        self._qs.setValue("recent_files", [])
        self._qs.sync()

    def bytes_value(self, key: str) -> QByteArray | None:
        """A saved QByteArray (geometry, window or splitter state), or None."""
        value = self._qs.value(key)
        return value if isinstance(value, QByteArray) and not value.isEmpty() else None

    def set_bytes_value(self, key: str, value: QByteArray) -> None:
        """Save a QByteArray."""
        self._qs.setValue(key, value)

    def flag(self, key: str, default: bool = False) -> bool:
        """A saved on/off choice (e.g. a collapsed header)."""
        value = self._qs.value(key, default)
        return value in (True, "true", "1", 1) if not isinstance(value, bool) else value

    def set_flag(self, key: str, value: bool) -> None:
        """Save an on/off choice."""
        self._qs.setValue(key, bool(value))

    def sync(self) -> None:
        """Write to disk now."""
        self._qs.sync()
