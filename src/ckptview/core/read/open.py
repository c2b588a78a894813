"""`open_checkpoint`: sniff a path and hand it to the reader of its format."""

from __future__ import annotations

import os
import stat

from ckptview.core.budget import NESTED_FLOOR, OPEN_COST, Budget
from ckptview.core.checkpoint import BoundedWarnings, Checkpoint
from ckptview.core.errors import (
    Cancelled,
    CheckpointError,
    CheckpointFormatError,
    NotACheckpointError,
    RemoteError,
)
from ckptview.core.gc_policy import paused_gc
from ckptview.core.read.bytes.files import (
    FileIdentity,
    folder_identities,
    io_error,
    open_regular,
    stat_checked,
)
from ckptview.core.read.bytes.fs import LOCAL, FileSystem
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.causes import is_missing
from ckptview.core.read.bytes.remote.fs import RemoteFS, not_found, opening
from ckptview.core.read.bytes.remote.urls import folder_url, require_extra, shown
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.folder_contents import (
    checkpoint_names,
    folder_error,
    other_checkpoints,
    others_note,
    run_folder_error,
)
from ckptview.core.read.formats import hf_sharded, readers
from ckptview.core.read.quant.config import read_config
from ckptview.core.read.quant.recognise import add_logical_tensors
from ckptview.core.redaction import redact
from ckptview.core.units import human_bytes, plural

HEAD_BYTES = 4096


def open_checkpoint(path: str | os.PathLike[str], ctx: ReaderContext | None = None) -> Checkpoint:
    """Read a checkpoint's metadata (never its tensor bytes, never running its code).

    `ctx` (cancel, progress, the remote session of an enclosing open and the remote options, nesting)
    goes to the reader; a nested open (an index's shards) passes the context its reader was given,
    derived. Whether `path` is local or remote is decided here, once: the `Source` carries its file system.

    The cyclic collector is paused meanwhile (`paused_gc`): a listing builds millions of small long-lived
    objects and no garbage cycles, and collections over the half-built tree cost more than the listing (a
    900,000-tensor header: 3x; 163 shards of 560 tensors: 2x).
    """
    with paused_gc():
        return _open(os.fspath(path), ctx)


def _open(path: str, ctx: ReaderContext | None) -> Checkpoint:
    ctx = (DEFAULT if ctx is None else ctx).opened_by(open_checkpoint)
    if locate(path).is_remote:
        return _open_url(path, ctx)
    st = stat_checked(path)  # a FIFO, socket or device is refused here, before anything opens it
    if stat.S_ISDIR(st.st_mode):
        identities = folder_identities(path)
        source = Source.folder(path, identities)
    else:
        identity = FileIdentity.of(st)
        identities = {path: identity}
        source = Source(path, _read_head(path, st), False, identity)  # the readers open it as this file
    try:
        ckpt = _open_with_readers(source, ctx)
    except NotACheckpointError as exc:
        if source.is_dir and str(exc) == describe_unknown(path, source.head):  # nothing more specific
            error = run_folder_error(path)
            if error is not None:  # a run folder: say what it holds and what opens it
                raise error from None
        raise
    ckpt.metadata.setdefault("_identities", identities)
    if stat.S_ISDIR(st.st_mode) and ckpt.format in hf_sharded.HUB_FORMATS:
        if ckpt.format in hf_sharded.ONE_FILE_FORMATS and not hf_sharded.described(path):
            # One weight file, nothing saying it is a model's folder (no config): among other checkpoints it is
            # one of a folder of them (a stray bf16 file was the folder, the other fifteen a warning).
            names = checkpoint_names(path)
            if len(names) > 1:
                ckpt.close()
                raise folder_error(path, names)
        used = set(ckpt.metadata.get("shards") or ())
        others = other_checkpoints(path, used, list(ckpt.warnings))
        note = others_note(path, others)
        if note is not None:
            ckpt.warnings.append(note)
            ckpt.metadata["_other_checkpoints"] = others  # the window offers to open them
    return ckpt


def _open_url(url: str, ctx: ReaderContext) -> Checkpoint:
    """A remote checkpoint: the same readers over range requests; `metadata["_transfer"]` counts them.

    It reads through the session of the enclosing open (`ctx.session`) when `url` lies below its root
    (the shards of an index, the parts of a folder): one transfer counts them all.
    """
    require_extra(url)
    # A download (--download, the window's "Download and open") reports each piece and stops on cancel.
    fs = RemoteFS(opening(url, ctx.session, ctx.remote, ctx.report if ctx.reports else None))
    began = fs.session is not ctx.session  # this open began the session: it ends it too
    ctx = ctx.with_session(fs.session)
    try:
        try:
            remote = fs.file(url)
        except RemoteError as exc:
            raise not_found(url) if is_missing(exc) else exc from None
        kind = "dir" if remote.is_dir else "file"
        head = b""
        if kind == "file":
            with fs.open_regular(url) as fh:
                head = fh.read(HEAD_BYTES)
        path = shown(url) if kind == "file" else folder_url(shown(url))
        try:
            ckpt = _open_with_readers(Source(path, head, kind == "dir", fs=fs), ctx)
        finally:
            remote.forget_head()  # read: its first bytes need not be kept beside the cache
            if began:
                fs.session.settle()
    except CheckpointError as exc:
        if type(exc).__init__ is not CheckpointError.__init__:
            raise
        redacted = type(exc)(redact(str(exc)))
        redacted.__dict__.update(exc.__dict__)  # markers (a missing file) stay
        raise redacted from None
    ckpt.path = shown(ckpt.path)
    ckpt.metadata["_transfer"] = fs.session.transfer
    ckpt.metadata.setdefault("_identities", {})
    downloads = fs.session.downloads
    if began and len(downloads) > 1:  # said once for the open, not once a file
        ckpt.warnings.append(f"the server does not honour range requests: {plural(len(downloads), 'file')} were downloaded "
                             f"whole ({human_bytes(sum(downloads))}) to read them")
    return ckpt


def _read_head(path: str, st: os.stat_result) -> bytes:
    """The first bytes of a regular file; a /proc or /sys pseudo-file (size 0, content on read) is refused."""
    try:
        with open_regular(path) as fh:
            head = fh.read(HEAD_BYTES)
    except CheckpointError as exc:
        if st.st_size == 0 and "cannot read" in str(exc):  # /proc/self/mem and the like: EIO on read
            raise NotACheckpointError(f"not a checkpoint: {path} is a pseudo-file (size 0 on disk, {exc})") from None
        raise
    except OSError as exc:
        if st.st_size == 0:
            raise NotACheckpointError(f"not a checkpoint: {path} is a pseudo-file (size 0 on disk, "
                                      f"reading it fails: {exc.strerror or exc})") from None
        raise io_error(path, exc) from None
    if len(head) > st.st_size or _is_pseudo(path):
        raise NotACheckpointError(f"not a checkpoint: {path} is a pseudo-file of the kernel (/proc or /sys: "
                                  f"its stat says {st.st_size} bytes, its content is made when read)")
    return head


def _is_pseudo(path: str) -> bool:
    real = os.path.realpath(path)
    return real.startswith(("/proc/", "/sys/")) or real in ("/proc", "/sys")


def _open_with_readers(source: Source, ctx: ReaderContext) -> Checkpoint:
    declined: NotACheckpointError | None = None
    try:
        stored = source.stored
    except (CheckpointError, OSError):  # a folder the byte layer cannot size: the budget's floor
        stored = 0
    if ctx.budget is None:  # one budget per source opened: a top-level open gets the floor
        budget = Budget.for_stored(stored, "the file", cancel=ctx.cancel)
    else:  # a nested open (a shard, a part): the enclosing open pays for opening it, its bytes for the rest
        ctx.budget.charge_shared(OPEN_COST, "files opened")  # a remote folder's shards open at once
        budget = Budget.for_stored(stored, "the file", cancel=ctx.cancel, floor=NESTED_FLOOR)
    ctx = ctx.with_budget(budget)
    for reader in readers():
        if reader.sniff(source):
            try:
                ckpt = reader.open(source, ctx)
                if not ctx.inside_index:  # a weight's parts may lie in two shards: the whole index is looked at
                    add_logical_tensors(ckpt, lambda: read_config(source))
                return _compact_warnings(ckpt)
            except NotACheckpointError as exc:  # looked like this format, is not: let others try
                declined = declined or exc
            except (CheckpointError, Cancelled):  # a cancelled open is not a malformed file
                raise
            except (MemoryError, RecursionError) as exc:
                raise CheckpointFormatError(f"{reader.NAME}: file is too large or too deeply nested ({type(exc).__name__})") from None
            except OSError as exc:
                raise io_error(source.path, exc) from None
            except Exception as exc:  # a reader bug must still reach the user as one line
                raise CheckpointFormatError(f"{reader.NAME}: malformed file ({type(exc).__name__}: {exc})") from None
    raise declined or NotACheckpointError(describe_unknown(source.path, source.head, source.fs))


MAX_BROKEN_LISTED = 20


def _compact_warnings(ckpt: Checkpoint) -> Checkpoint:
    """List the first broken tensors one by one and count the rest (each tensor says it is broken).

    A hostile file can mark a million tensors broken; a million warning lines help nobody. (The list
    itself keeps at most MAX_WARNINGS lines: see `BoundedWarnings`.)
    """
    warnings = ckpt.warnings
    kept = warnings.kept() if isinstance(warnings, BoundedWarnings) else list(warnings)
    dropped_broken = getattr(warnings, "dropped_broken", 0)
    dropped_other = getattr(warnings, "dropped", 0) - dropped_broken
    broken = [w for w in kept if w.startswith("tensor '") and " is broken: " in w]
    total_broken = len(broken) + dropped_broken
    if total_broken > MAX_BROKEN_LISTED:
        dropped = set(map(id, broken[MAX_BROKEN_LISTED:]))
        compact = [w for w in kept if id(w) not in dropped]
        compact.append(f"... and {total_broken - MAX_BROKEN_LISTED} more broken tensors")
        if dropped_other:
            compact.append(f"... and {dropped_other} more warning{'s' if dropped_other != 1 else ''}")
        ckpt.warnings = compact
    return ckpt


def describe_unknown(path: str, head: bytes, fs: FileSystem = LOCAL) -> str:
    """'not a checkpoint: ...' naming what the bytes look like."""
    if fs.isdir(path):
        return f"not a checkpoint: folder {path} holds no checkpoint this tool reads"
    size = fs.getsize(path)
    if size == 0:
        return "not a checkpoint: file is empty"
    if head.startswith(b"version https://git-lfs"):
        return "not a checkpoint: file is a Git LFS pointer (run `git lfs pull` to fetch the real file)"
    kinds = [
        (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
        (b"%PDF", "a PDF document"), (b"\x1f\x8b", "gzip-compressed data"), (b"\x93NUMPY", "a NumPy .npy array"),
        (b"\x89HDF", "an HDF5 file"), (b"BZh", "bzip2-compressed data"), (b"\xfd7zXZ", "xz-compressed data"),
        (b"PK\x03\x04", "a zip archive without a PyTorch record"), (b"\x7fELF", "an executable"),
    ]
    for magic, what in kinds:
        if head.startswith(magic):
            return f"not a checkpoint: file is {what}"
    if head[257:262] == b"ustar":
        return ("not a checkpoint this tool reads: file is a tar archive (PyTorch before 0.1.10 saved "
                "checkpoints as tar files; load it with that PyTorch and save it again)")
    stripped = head.lstrip().lower()
    if stripped.startswith((b"<!doctype html", b"<html")):
        return f"not a checkpoint: file is {size} bytes of HTML (a download that saved a web page?)"
    try:
        head.decode("utf-8")
        if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head[:512]):
            return f"not a checkpoint: file is {size} bytes of text"
    except UnicodeDecodeError:
        pass
    return f"not a checkpoint: unrecognised {size}-byte file (starts with {head[:8].hex(' ')})"
