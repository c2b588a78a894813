"""What was read of a run's checkpoints, kept between runs in SQLite (Qt-free, no torch).

The cache is never the truth. An entry is found by the file's identity *now* (:func:`file_key`): its path
or URL, device, inode, size, modification time and status-change time (ctime: a rewrite in place changes it,
and `os.utime` cannot set it back), and a digest of its content sampled across all of it (the first and
last 64 KiB and a 4 KiB block every MiB, at most 256 of them; a URL: the server's validator and its edges).
A file that changed in any of these has another key, so it is read again, and the entry of its old content
is dropped when the new one is written. Figures also depend on how values are cut into chunks, so the chunk
size is part of the key.

The database stays bounded: entries of local files that no longer exist are evicted when it is opened, and
past `MAX_BYTES` of figures the least recently used entries go. Every write is one transaction in a
WAL-journalled database: a process killed mid-write leaves the database as it was before that write. A
database that cannot be read (a disk fault, another program's file) is moved aside (one copy kept) and
started again, with one warning (`SeriesCache.take_warnings`); a cache that cannot be written is skipped.
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
from ckptview.core.read.bytes.files import folder_identities, open_regular
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.fs import RemoteFS, begin_session
from ckptview.core.read.bytes.remote.options import DEFAULT as DEFAULT_REMOTE
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.series.model import TensorFigures

VERSION = 3  # of the figures, the key and the schema: a new version starts a new database file
EDGE_BYTES = 64 << 10  # the head and the tail of a file, hashed whole
SAMPLE_BYTES = 4 << 10  # one sampled block of the content between them...
SAMPLE_EVERY = 1 << 20  # ...every MiB...
MAX_SAMPLES = 256  # ...at most this many (a larger file: its blocks spread evenly over all of it)
MAX_BYTES = 256 << 20  # figures kept, at most; past it the least recently used entries are evicted
EVICT_TO = 0.9  # eviction goes down to this share of MAX_BYTES, so that it does not run on every write
DB_NAME = f"series-v{VERSION}.sqlite3"
# The small columns first: SQLite reads a row's columns in order, through the overflow pages of large
# values before them, and the size sums and the eviction order read only `used` and `size`.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, location TEXT NOT NULL, used REAL NOT NULL,
                                    size INTEGER NOT NULL DEFAULT 0, meta TEXT, figures TEXT);
CREATE INDEX IF NOT EXISTS entries_location ON entries (location);
CREATE INDEX IF NOT EXISTS entries_lru ON entries (used, size);
CREATE TABLE IF NOT EXISTS pairs (prev TEXT NOT NULL, cur TEXT NOT NULL, size INTEGER NOT NULL DEFAULT 0,
                                  sums TEXT NOT NULL, PRIMARY KEY (prev, cur));
CREATE INDEX IF NOT EXISTS pairs_cur ON pairs (cur);
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
    return path if locate(path).is_remote else os.path.realpath(path)


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
    if locate(path).is_remote:  # asked through a session of its own: what the server says now
        fs = RemoteFS(begin_session(path, remote))
        rf = fs.file(path)
        if rf.is_dir:
            parts.append(sorted(fs.listdir(path)))
        else:
            parts += [rf.size, rf.validator, _digest([rf.read(0, min(EDGE_BYTES, rf.size)),
                                                      rf.read(max(0, rf.size - EDGE_BYTES), min(EDGE_BYTES, rf.size))])]
    elif os.path.isdir(path):
        files = folder_identities(path)
        parts.append([[os.path.basename(p), *_local_identity(p)] for p in sorted(files)])
    else:
        parts += _local_identity(path)
    return hashlib.blake2b(json.dumps(parts).encode(), digest_size=20).hexdigest()


def _local_identity(path: str) -> list[Any]:
    """[device, inode, size, mtime, ctime, content digest] of a regular file, read through one descriptor."""
    with open_regular(path) as fh:  # never blocks on a FIFO swapped in after a stat
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"not a regular file: {path}")
        pieces = [os.pread(fh.fileno(), length, offset) for offset, length in sample_ranges(st.st_size)]
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, _digest(pieces)]


def sample_ranges(size: int) -> list[tuple[int, int]]:
    """(offset, length) of the bytes a file of `size` bytes is hashed by: its first and last EDGE_BYTES and
    a SAMPLE_BYTES block every SAMPLE_EVERY bytes between them (at most MAX_SAMPLES, spread evenly)."""
    ranges = [(0, min(EDGE_BYTES, size))]
    inner = size - 2 * EDGE_BYTES
    if inner > 0:
        count = min(MAX_SAMPLES, max(1, inner // SAMPLE_EVERY))
        step = inner / count
        for i in range(count):
            start = EDGE_BYTES + int(i * step + step / 2)
            ranges.append((start, min(SAMPLE_BYTES, size - EDGE_BYTES - start)))
    if size > EDGE_BYTES:
        ranges.append((max(EDGE_BYTES, size - EDGE_BYTES), min(EDGE_BYTES, size - EDGE_BYTES)))
    return ranges


def _digest(pieces: list[bytes]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for piece in pieces:
        h.update(len(piece).to_bytes(8, "little"))
        h.update(piece)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------
# The database.


def _is_corrupt(exc: BaseException) -> bool:
    """A database that cannot be read as one ("file is not a database", "disk image is malformed"), as
    opposed to one that is busy or a disk that is full (OperationalError: skipped, never thrown away)."""
    return type(exc) is sqlite3.DatabaseError


class SeriesCache:
    """The series figures of checkpoints already read, by file key (thread-safe; one connection)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or default_path()
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._rebuilt = False  # set aside once: a database that breaks again is skipped, not rebuilt in a loop
        self._warnings: list[str] = []

    def take_warnings(self) -> list[str]:
        """The lines for people since the last call (a broken database started again), then forgotten."""
        with self._lock:
            out, self._warnings = self._warnings, []
        return out

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None:
            return self._db
        try:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            if _is_corrupt(exc):
                self._rebuild(exc)
            else:
                self._db = None
        except (OSError, sqlite3.Error):
            self._db = None
        return self._db

    def _rebuild(self, exc: BaseException) -> None:
        """Keep the unreadable database aside (only the latest such copy) and start a new one."""
        if self._db is not None:
            with suppress(sqlite3.Error):
                self._db.close()
            self._db = None
        if self._rebuilt:
            return
        self._rebuilt = True
        folder, name = os.path.split(self.path)
        aside = f"{self.path}.broken-{int(time.time())}"
        try:
            for old in os.listdir(folder or "."):
                if old.startswith(name + ".broken-"):
                    os.unlink(os.path.join(folder, old))
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):  # the journal of the broken file is not the new one's
                with suppress(FileNotFoundError):
                    os.unlink(self.path + suffix)
            self._db = self._open()
        except (OSError, sqlite3.Error):
            self._db = None
            return
        self._warnings.append(f"the series cache could not be read ({exc}): started again; the old file is "
                              f"kept as {aside}")

    def _open(self) -> sqlite3.Connection:
        fresh = not os.path.exists(self.path)
        db = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
        try:
            if fresh:  # set before the first table: pages freed by evictions go back to the file system
                db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA journal_size_limit={4 << 20}")
            db.executescript(_SCHEMA)
            db.execute("SELECT count(*), coalesce(sum(size), 0) FROM entries").fetchone()
            self._evict_gone(db)
        except BaseException:
            db.close()
            raise
        if fresh:
            _remove_older_versions(self.path)
        return db

    def _evict_gone(self, db: sqlite3.Connection) -> None:
        """Drop the entries of local files that no longer exist (a rotating run deletes its old checkpoints)."""
        gone = [key for key, loc in db.execute("SELECT key, location FROM entries")
                if not loc.startswith("url:") and not os.path.lexists(loc)]
        if gone:
            db.execute("BEGIN IMMEDIATE")
            try:
                _delete(db, gone)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            db.execute("PRAGMA incremental_vacuum")

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
                with suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _query(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            for _attempt in range(2):
                db = self._connect()
                if db is None:
                    return []
                try:
                    return db.execute(sql, args).fetchall()
                except sqlite3.Error as exc:
                    if not _is_corrupt(exc):
                        return []
                    self._rebuild(exc)
            return []

    def _write(self, work: Any) -> None:
        """`work(db)` in one transaction; a corrupt database is set aside and the write tried on a new one."""
        with self._lock:
            for _attempt in range(2):
                try:
                    with self._transaction() as db:
                        if db is not None:
                            work(db)
                    return
                except sqlite3.Error as exc:
                    if not _is_corrupt(exc):
                        return
                    self._rebuild(exc)

    def _touch(self, *keys: str) -> None:
        """Mark entries as just used (the eviction order)."""
        now = time.time()
        self._write(lambda db: db.executemany("UPDATE entries SET used = ? WHERE key = ?",
                                              [(now, k) for k in keys]))

    # --- reading ----------------------------------------------------------------------------------
    def meta(self, key: str) -> dict[str, Any] | None:
        """What planning needs of a checkpoint (format, step/epoch, tensor list), or None."""
        rows = self._query("SELECT meta FROM entries WHERE key = ?", (key,))
        found = _loads(rows[0][0]) if rows and rows[0][0] else None
        if not isinstance(found, dict):
            return None
        self._touch(key)
        return found

    def figures(self, key: str) -> dict[str, TensorFigures] | None:
        """The checkpoint's own figures per tensor (no update sums), or None when not cached."""
        rows = self._query("SELECT figures FROM entries WHERE key = ?", (key,))
        if not rows or not rows[0][0]:
            return None
        raw = _loads(rows[0][0])
        if not isinstance(raw, dict):
            return None
        try:  # rows of another shape (another program, a half-understood version) are a miss, never a crash
            found = {name: TensorFigures(_stats(v.get("stats")), _text(v.get("error")), alpha=_float(v.get("alpha")),
                                         stable_rank=_float(v.get("stable_rank")), spectral=v.get("spectral") is True)
                     for name, v in raw.items()}
        except (AttributeError, TypeError, ValueError):
            return None
        self._touch(key)
        return found

    def pair(self, prev: str, cur: str) -> dict[str, Sums] | None:
        """The update sums per tensor between two checkpoints, or None when not cached."""
        rows = self._query("SELECT sums FROM pairs WHERE prev = ? AND cur = ?", (prev, cur))
        if not rows:
            return None
        raw = _loads(rows[0][0])
        if not isinstance(raw, dict):
            return None
        try:
            return {name: Sums(**v) for name, v in raw.items()}
        except (AttributeError, TypeError, ValueError):
            return None

    def count(self) -> int:
        """Checkpoints held."""
        rows = self._query("SELECT count(*) FROM entries", ())
        return int(rows[0][0]) if rows else 0

    def held_bytes(self) -> int:
        """Bytes of figures held (what MAX_BYTES bounds)."""
        rows = self._query("SELECT (SELECT coalesce(sum(size), 0) FROM entries) + "
                           "(SELECT coalesce(sum(size), 0) FROM pairs)", ())
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

        def work(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR REPLACE INTO pairs (prev, cur, size, sums) VALUES (?, ?, ?, ?)",
                       (prev, cur, len(text), text))
            db.execute("UPDATE entries SET used = ? WHERE key IN (?, ?)", (time.time(), prev, cur))
            self._evict_over_cap(db, keep=(prev, cur))

        self._write(work)

    def _put(self, key: str, path: str, column: str, value: Any) -> None:
        loc = stored_location(path)
        text = json.dumps(value)
        other = "figures" if column == "meta" else "meta"

        def work(db: sqlite3.Connection) -> None:
            old = [r[0] for r in db.execute("SELECT key FROM entries WHERE location = ? AND key != ?", (loc, key))]
            _delete(db, old)  # the file's older contents: never to be seen again
            db.execute("INSERT OR IGNORE INTO entries (key, location, used) VALUES (?, ?, ?)",
                       (key, loc, time.time()))
            db.execute(f"UPDATE entries SET {column} = ?, used = ?, size = ? + coalesce(length({other}), 0) "
                       "WHERE key = ?", (text, time.time(), len(text), key))
            self._evict_over_cap(db, keep=(key,))

        self._write(work)

    def _evict_over_cap(self, db: sqlite3.Connection, keep: tuple[str, ...]) -> None:
        """Past MAX_BYTES, drop the least recently used entries (and their pairs) down to EVICT_TO of it."""
        held = db.execute("SELECT (SELECT coalesce(sum(size), 0) FROM entries) + "
                          "(SELECT coalesce(sum(size), 0) FROM pairs)").fetchone()[0]
        if held <= MAX_BYTES:
            return
        target = int(MAX_BYTES * EVICT_TO)
        victims: list[str] = []
        for key, size in db.execute("SELECT key, size FROM entries ORDER BY used"):
            if held <= target:
                break
            if key in keep:
                continue
            victims.append(key)
            held -= size
            held -= db.execute("SELECT coalesce(sum(size), 0) FROM pairs WHERE prev = ? OR cur = ?",
                               (key, key)).fetchone()[0]
        _delete(db, victims)

    def clear(self) -> int:
        """Forget everything; returns how many checkpoints were held."""
        held = self.count()

        def work(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM entries")
            db.execute("DELETE FROM pairs")

        self._write(work)
        with self._lock:
            if self._db is not None:
                with suppress(sqlite3.Error):
                    self._db.execute("VACUUM")
        return held


def _delete(db: sqlite3.Connection, keys: list[str]) -> None:
    for key in keys:
        db.execute("DELETE FROM entries WHERE key = ?", (key,))
        db.execute("DELETE FROM pairs WHERE prev = ? OR cur = ?", (key, key))


def _remove_older_versions(path: str) -> None:
    """A new database version leaves the files of the older ones behind for good: remove them."""
    folder = os.path.dirname(path) or "."
    with suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith("series-v") and not name.startswith(f"series-v{VERSION}.") and ".sqlite3" in name:
                with suppress(OSError):
                    os.unlink(os.path.join(folder, name))


def _text(raw: Any) -> str | None:
    return raw if isinstance(raw, str) else None


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
