"""What was read of a run's checkpoints, kept between runs in SQLite (Qt-free, no torch).

The cache is never the truth. An entry is found by the file's identity *now*: its path or URL, size,
modification time (or the server's validator: ETag, ...), inode, and a hash of its first and last
64 KiB (:func:`file_key`); a file that changed in any of these has another key, so it is read again, and
the entry of its old content is dropped when the new one is written. Figures also depend on how values
are cut into chunks, so the chunk size is part of the key.

Every write is one transaction in a WAL-journalled database: a process killed mid-write leaves the
database as it was before that write. A database that cannot be read (a disk fault, another program's
file) is moved aside and started again; a cache that cannot be written is skipped silently.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from ckptview.core.compare.diff import Sums
from ckptview.core.errors import CheckpointError
from ckptview.core.figures.stats import TensorStats
from ckptview.core.read.bytes.files import folder_identities, is_url, open_regular
from ckptview.core.read.bytes.remote.fs import RemoteFS, begin_session
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.model import TensorFigures

VERSION = 2  # of the figures and of the schema: a new version starts a new database file
EDGE_BYTES = 64 << 10
DB_NAME = f"series-v{VERSION}.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, location TEXT NOT NULL, meta TEXT,
                                    figures TEXT, used REAL NOT NULL);
CREATE INDEX IF NOT EXISTS entries_location ON entries (location);
CREATE TABLE IF NOT EXISTS pairs (prev TEXT NOT NULL, cur TEXT NOT NULL, sums TEXT NOT NULL,
                                  PRIMARY KEY (prev, cur));
"""


def cache_dir() -> str:
    """The user's cache folder for ckptview (platformdirs; XDG_CACHE_HOME respected)."""
    try:
        import platformdirs
    except ImportError:  # the series extra is not installed: the XDG rule by hand
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "ckptview")
    return str(platformdirs.user_cache_dir("ckptview", appauthor=False))


def default_path() -> str:
    """Where the series cache lives."""
    return os.path.join(cache_dir(), DB_NAME)


# ---------------------------------------------------------------------------------------------------
# Identity.


def location(path: str) -> str:
    """The path as the cache knows it: a URL as shown, a local path resolved."""
    return path if is_url(path) else os.path.realpath(path)


def stored_location(path: str) -> str:
    """The location as written in the database: a URL only by its hash (it may carry a token)."""
    loc = location(path)
    if "://" not in loc:
        return loc
    return "url:" + hashlib.blake2b(loc.encode(), digest_size=20).hexdigest()


def file_key(path: str, chunk_elems: int, remote: RemoteOptions = DEFAULT_REMOTE) -> str:
    """The cache key of ``path`` as it is now (raises OSError/CheckpointError when it cannot be read; a
    URL is asked with `remote`)."""
    parts: list[Any] = [VERSION, chunk_elems, location(path)]
    if is_url(path):  # asked through a session of its own: what the server says now
        fs = RemoteFS(begin_session(path, remote))
        rf = fs.file(path)
        if rf.is_dir:
            parts.append(sorted(fs.listdir(path)))
        else:
            parts += [rf.size, rf.validator, _digest(rf.read(0, min(EDGE_BYTES, rf.size)),
                                                     rf.read(max(0, rf.size - EDGE_BYTES), min(EDGE_BYTES, rf.size)))]
    elif os.path.isdir(path):
        files = folder_identities(path)
        parts.append([[os.path.basename(p), ident.ino, ident.size, ident.mtime_ns, _local_edges(p)]
                      for p, ident in sorted(files.items())])
    else:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"not a regular file: {path}")
        parts += [st.st_ino, st.st_size, st.st_mtime_ns, _local_edges(path)]
    return hashlib.blake2b(json.dumps(parts).encode(), digest_size=20).hexdigest()


def _local_edges(path: str) -> str:
    with open_regular(path) as fh:  # never blocks on a FIFO swapped in after the stat
        head = fh.read(EDGE_BYTES)
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - EDGE_BYTES))
        tail = fh.read(EDGE_BYTES)
    return _digest(head, tail)


def _digest(head: bytes, tail: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(head)
    h.update(tail)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------
# The database.


class SeriesCache:
    """The series figures of checkpoints already read, by file key (thread-safe; one connection)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or default_path()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None:
            return self._db
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._db = self._open()
        except sqlite3.DatabaseError:
            try:  # unreadable: keep it aside for a person to look at, start a new one
                os.replace(self.path, f"{self.path}.broken-{int(time.time())}")
                self._db = self._open()
            except (OSError, sqlite3.Error):
                self._db = None
        except (OSError, sqlite3.Error):
            self._db = None
        return self._db

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            db.execute("SELECT count(*) FROM entries").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        """Close the connection (the cache opens it again when next used)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection | None]:
        with self._lock:
            db = self._connect()
            if db is None:
                yield None
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            db = self._connect()
            if db is None:
                return []
            try:
                return db.execute(sql, args).fetchall()
            except sqlite3.Error:
                return []

    # --- reading ----------------------------------------------------------------------------------
    def meta(self, key: str) -> dict[str, Any] | None:
        """What planning needs of a checkpoint (format, step/epoch, tensor list), or None."""
        rows = self._query("SELECT meta FROM entries WHERE key = ?", (key,))
        return _loads(rows[0][0]) if rows and rows[0][0] else None

    def figures(self, key: str) -> dict[str, TensorFigures] | None:
        """The checkpoint's own figures per tensor (no update sums), or None when not cached."""
        rows = self._query("SELECT figures FROM entries WHERE key = ?", (key,))
        if not rows or not rows[0][0]:
            return None
        raw = _loads(rows[0][0])
        if not isinstance(raw, dict):
            return None
        return {name: TensorFigures(_stats(v.get("stats")), v.get("error"), alpha=_float(v.get("alpha")),
                                    stable_rank=_float(v.get("stable_rank")), spectral=v.get("spectral") is True)
                for name, v in raw.items()}

    def pair(self, prev: str, cur: str) -> dict[str, Sums] | None:
        """The update sums per tensor between two checkpoints, or None when not cached."""
        rows = self._query("SELECT sums FROM pairs WHERE prev = ? AND cur = ?", (prev, cur))
        if not rows:
            return None
        raw = _loads(rows[0][0])
        return {name: Sums(**v) for name, v in raw.items()} if isinstance(raw, dict) else None

    def count(self) -> int:
        """Checkpoints held."""
        rows = self._query("SELECT count(*) FROM entries", ())
        return int(rows[0][0]) if rows else 0

    # --- writing ----------------------------------------------------------------------------------
    def put_meta(self, key: str, path: str, meta: dict[str, Any]) -> None:
        """Keep a checkpoint's planning facts (drops the entries of older contents of that path)."""
        self._put(key, path, "meta", meta)

    def put_figures(self, key: str, path: str, figures: dict[str, TensorFigures]) -> None:
        """Keep a checkpoint's own figures."""
        raw = {name: {"stats": dataclasses.asdict(f.stats) if f.stats is not None else None, "error": f.error,
                      **({"spectral": True, "alpha": f.alpha, "stable_rank": f.stable_rank} if f.spectral else {})}
               for name, f in figures.items()}
        self._put(key, path, "figures", raw)

    def put_pair(self, prev: str, cur: str, sums: dict[str, Sums]) -> None:
        """Keep the update sums between two checkpoints."""
        text = json.dumps({name: dataclasses.asdict(s) for name, s in sums.items()})
        try:
            with self._transaction() as db:
                if db is not None:
                    db.execute("INSERT OR REPLACE INTO pairs (prev, cur, sums) VALUES (?, ?, ?)", (prev, cur, text))
        except sqlite3.Error:
            pass

    def _put(self, key: str, path: str, column: str, value: Any) -> None:
        loc = stored_location(path)
        text = json.dumps(value)
        try:
            with self._transaction() as db:
                if db is None:
                    return
                old = [r[0] for r in db.execute("SELECT key FROM entries WHERE location = ? AND key != ?",
                                                (loc, key))]
                for stale in old:  # the file's older contents: never to be seen again
                    db.execute("DELETE FROM entries WHERE key = ?", (stale,))
                    db.execute("DELETE FROM pairs WHERE prev = ? OR cur = ?", (stale, stale))
                db.execute("INSERT OR IGNORE INTO entries (key, location, used) VALUES (?, ?, ?)",
                           (key, loc, time.time()))
                db.execute(f"UPDATE entries SET {column} = ?, used = ? WHERE key = ?", (text, time.time(), key))
        except sqlite3.Error:
            pass

    def clear(self) -> int:
        """Forget everything; returns how many checkpoints were held."""
        held = self.count()
        try:
            with self._transaction() as db:
                if db is not None:
                    db.execute("DELETE FROM entries")
                    db.execute("DELETE FROM pairs")
        except sqlite3.Error:
            pass
        with self._lock:
            if self._db is not None:
                with suppress(sqlite3.Error):
                    self._db.execute("VACUUM")
        return held


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _stats(raw: Any) -> TensorStats | None:
    if not isinstance(raw, dict):
        return None
    try:
        return TensorStats(**raw)
    except TypeError:
        return None


def _float(raw: Any) -> float | None:
    return float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
