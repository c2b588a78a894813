"""Library graphs kept between runs in SQLite: a traced architecture found again without a worker.

Tracing a 1B-parameter architecture takes seconds of a worker's time; its graph depends only on what was
traced (the library and its version, torch's version, the class, the config's content, the input shapes
and dtype), never on the checkpoint's bytes, so that is the key. The cache is never the truth: an entry that
does not read back as a graph is dropped and traced again; a cache that cannot be opened or written is
skipped. Every write is one transaction of a WAL-journalled database (the series cache's habits).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from typing import Any

from ckptview.core.series.cache import cache_dir

VERSION = 2  # of what an entry holds (2: module classes): a new version starts a new database file
DB_NAME = f"graphs-v{VERSION}.sqlite3"
MAX_ENTRIES = 200  # the least recently used beyond this are dropped
_SCHEMA = "CREATE TABLE IF NOT EXISTS graphs (key TEXT PRIMARY KEY, traced TEXT NOT NULL, used REAL NOT NULL);"


def default_path() -> str:
    """Where the graph cache lives (the user's cache folder)."""
    return os.path.join(cache_dir(), DB_NAME)


def trace_key(parts: Any) -> str:
    """The key of what was traced: a hash of its JSON (keys sorted: a config's key order changes nothing)."""
    text = json.dumps([VERSION, parts], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


class GraphCache:
    """Traced graphs by trace key (thread-safe; one connection opened on first use)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or default_path()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._failed = False

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None or self._failed:
            return self._db
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._db = self._open()
        except sqlite3.DatabaseError:
            try:  # unreadable: kept aside for a person to look at, a new one started
                os.replace(self.path, f"{self.path}.broken-{int(time.time())}")
                self._db = self._open()
            except (OSError, sqlite3.Error):
                self._failed = True
        except (OSError, sqlite3.Error):
            self._failed = True
        return self._db

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            db.execute("SELECT count(*) FROM graphs").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def get(self, key: str) -> Any:
        """The JSON kept under `key`, or None (also when it does not parse: it is dropped)."""
        with self._lock:
            db = self._connect()
            if db is None:
                return None
            try:
                row = db.execute("SELECT traced FROM graphs WHERE key = ?", (key,)).fetchone()
                if row is None:
                    return None
                try:
                    value = json.loads(row[0])
                except (ValueError, RecursionError):
                    db.execute("DELETE FROM graphs WHERE key = ?", (key,))
                    return None
                db.execute("UPDATE graphs SET used = ? WHERE key = ?", (time.time(), key))
                return value
            except sqlite3.Error:
                return None

    def drop(self, key: str) -> None:
        """Forget `key` (an entry that read back but is not a graph)."""
        self._write("DELETE FROM graphs WHERE key = ?", (key,))

    def put(self, key: str, value: Any) -> None:
        """Keep `value` (JSON-able) under `key`, dropping the least recently used beyond MAX_ENTRIES."""
        self._write("INSERT OR REPLACE INTO graphs (key, traced, used) VALUES (?, ?, ?)",
                    (key, json.dumps(value), time.time()))
        self._write("DELETE FROM graphs WHERE key NOT IN (SELECT key FROM graphs ORDER BY used DESC LIMIT ?)",
                    (MAX_ENTRIES,))

    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        with self._lock:
            db = self._connect()
            if db is None:
                return
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.execute(sql, args)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error:
                pass

    def close(self) -> None:
        """Close the connection (opened again when next used)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

