"""Parameter orders learned from a library, kept between runs in SQLite: a Trainer folder's optimizer is
named at metadata cost the second time, and every time after.

Learning the order of a Hub model (`hf_order.learn`: the model built on the meta device in a child process)
takes seconds and a few hundred MB; the order depends only on the model class, its config and the library's
version, never on the checkpoint, so that is the key (`OrderRequest.key`): a new transformers asks again.
The caller makes the cache (the command line, the window's workspace) and hands it down; the core keeps
none of its own. The cache is never the truth: an entry that does not read back as a list of names is
dropped; a database that cannot be read is moved aside and started again; one that cannot be written is
skipped. Every write is one transaction of a WAL-journalled database (the series cache's habits).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from typing import Any

from ckptview.core.inspect.hf_order import OrderRequest, learn

VERSION = 1  # of what an entry holds: a new version starts a new database file
DB_NAME = f"param-orders-v{VERSION}.sqlite3"
MAX_ENTRIES = 500  # the least recently used beyond this are dropped
_SCHEMA = "CREATE TABLE IF NOT EXISTS orders (key TEXT PRIMARY KEY, names TEXT NOT NULL, used REAL NOT NULL);"


def default_path() -> str:
    """Where the orders are kept: the user's cache folder for ckptview (platformdirs; XDG_CACHE_HOME
    respected), as the series and graph caches."""
    try:
        import platformdirs
    except ImportError:  # the series extra is not installed: the XDG rule by hand
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "ckptview", DB_NAME)
    return os.path.join(str(platformdirs.user_cache_dir("ckptview", appauthor=False)), DB_NAME)


class ParamOrderCache:
    """Learned parameter orders by request key (thread-safe; the database opened on first use)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or default_path()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._failed = False

    def known(self, request: OrderRequest) -> list[str] | None:
        """The names learned before for `request`'s key ([]: the library could not tell them), or None (not
        learned yet, or an entry that does not read back)."""
        with self._lock:
            db = self._connect()
            if db is None:
                return None
            try:
                row = db.execute("SELECT names FROM orders WHERE key = ?", (request.key,)).fetchone()
                if row is None:
                    return None
                try:
                    names = json.loads(row[0])
                except (ValueError, RecursionError):
                    names = None
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    db.execute("DELETE FROM orders WHERE key = ?", (request.key,))
                    return None
                db.execute("UPDATE orders SET used = ? WHERE key = ?", (time.time(), request.key))
                return names
            except sqlite3.Error:
                return None

    def keep(self, request: OrderRequest, names: list[str]) -> None:
        """Keep `names` for `request`'s key, dropping the least recently used beyond MAX_ENTRIES."""
        self._write("INSERT OR REPLACE INTO orders (key, names, used) VALUES (?, ?, ?)",
                    (request.key, json.dumps(names), time.time()))
        self._write("DELETE FROM orders WHERE key NOT IN (SELECT key FROM orders ORDER BY used DESC LIMIT ?)",
                    (MAX_ENTRIES,))

    def learn(self, requests: Iterable[OrderRequest]) -> int:
        """Learn each order not known yet (`hf_order.learn`: a child process each, seconds) and keep it, or
        keep [] when the library cannot tell it (not one of its models, a build that fails), so it is not
        asked again for that config and version; how many were learned."""
        learned = 0
        for request in requests:
            if self.known(request) is not None:
                continue
            names = learn(request)
            self.keep(request, names or [])
            learned += names is not None
        return learned

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
            db.execute("SELECT count(*) FROM orders").fetchone()
        except BaseException:
            db.close()
            raise
        return db

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
