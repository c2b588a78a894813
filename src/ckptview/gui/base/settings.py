"""The few settings the window keeps between runs, typed, over QSettings."""

from __future__ import annotations

import os

from PySide6.QtCore import QByteArray, QSettings

from ckptview.gui.base.palette import CHOICES as PALETTES

MAX_RECENT = 12
# A safetensors header above this (about 38,000 tensors) asks first: the reader's json.loads holds the GIL
# for the whole header (about 0.1 s per MB on a busy 2-core machine), so the window cannot repaint meanwhile.
HEADER_ASK_BYTES = 4 * 1024 * 1024


class Settings:
    """Recent files, window geometry/state, splitter sizes and the palette; `path` gives tests their own ini file."""

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
        return [str(v) for v in value] if isinstance(value, list) else []

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

    def column_choice(self, column: str) -> bool | None:
        """Whether the user asked for a tree column (`Size`, ...) shown (True) or hidden (False); None: the
        tree decides (columns give way to the names); key `tree/columns/<column>`."""
        value = self._qs.value(f"tree/columns/{column}", "")
        return {"shown": True, "hidden": False}.get(str(value))

    def set_column_choice(self, column: str, shown: bool | None) -> None:
        """Keep the user's choice for a tree column (None: let the tree decide again)."""
        key = f"tree/columns/{column}"
        if shown is None:
            self._qs.remove(key)
        else:
            self._qs.setValue(key, "shown" if shown else "hidden")

    def header_ask_bytes(self) -> int | None:
        """Header size above which opening asks first (None: never ask); key `open/header_ask_bytes`."""
        value = self._qs.value("open/header_ask_bytes", HEADER_ASK_BYTES)
        try:
            limit = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return HEADER_ASK_BYTES
        return limit if limit > 0 else None

    def set_header_ask_bytes(self, limit: int | None) -> None:
        """Set the header size above which opening asks (None or 0: never ask)."""
        self._qs.setValue("open/header_ask_bytes", int(limit or 0))

    def palette(self) -> str:
        """The palette chosen in View > Palette: "system" (the default), "light" or "dark"; key `view/palette`."""
        value = str(self._qs.value("view/palette", "system"))
        return value if value in PALETTES else "system"

    def set_palette(self, choice: str) -> None:
        """Keep the palette choice ("system", "light" or "dark")."""
        self._qs.setValue("view/palette", choice if choice in PALETTES else "system")

    def scheduler(self) -> str | None:
        """The Dask scheduler a comparison's and an export's reading runs on (None: this machine, its cores
        when a checkpoint is large enough); key `compute/scheduler` (Tools > Compute On…)."""
        value = str(self._qs.value("compute/scheduler", "") or "").strip()
        return value or None

    def set_scheduler(self, address: str | None) -> None:
        """Keep the scheduler's address (None or empty: this machine)."""
        self._qs.setValue("compute/scheduler", (address or "").strip())

    def sync(self) -> None:
        """Write to disk now."""
        self._qs.sync()
