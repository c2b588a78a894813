"""Export tensors to a folder of .npy files, one .npz archive, or one .safetensors file.

Planning reads only metadata: which tensors, which file or key each gets (safe and unique, see
`safe_names`), which dtype is written and why. `run_export` is a generator that streams the values one
chunk at a time, yields `Progress`, honours a `CancelToken`, writes to temporary names in the target
folder and renames them into place only once everything is complete (an interrupted export leaves no
file under a final name, and removes its temporary files).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import time
import typing
import zipfile
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ckptview.core import dtypes
from ckptview.core.checkpoint import Checkpoint, Node, TensorEntry, TensorInfo
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.export import blocks as export_io
from ckptview.core.export import npy
from ckptview.core.export import safetensors as st
from ckptview.core.export.blocks import BlockWriter
from ckptview.core.export.safe_names import Deduplicator, is_safe_member, safe_file_stem
from ckptview.core.export.temps import SYNC_BATCH, Temps, sync_folder, syncfs_available
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.message import Fix, Hint, Message, rephrased
from ckptview.core.read.bytes.files import ReadAhead, read_ahead
from ckptview.core.read.values.reading import DEFAULT_CHUNK_ELEMS, iter_chunks, read_small
from ckptview.core.read.values.repeats import repeats
from ckptview.core.text import elide, printable
from ckptview.core.units import human_bytes, plural

if TYPE_CHECKING:
    import numpy as np

FORMATS = ("npy", "npz", "safetensors")
MANIFEST = "manifest.json"
_SUFFIXES = {".npy": "npy", ".npz": "npz", ".safetensors": "safetensors"}
REPORT_SECONDS = 0.05  # progress is yielded at most this often (once per tensor flooded the window's queue)
# A .npy file up to this size is read at once (from windows of the file, `read_ahead`) and written in one call:
# a folder of 200,000 tiny tensors pays a few system calls each, not a chunk reader and a block writer each.
SMALL_FILE_BYTES = 64 << 10
NAME_IN_PROGRESS = 200  # characters of a tensor name in a progress message
_clock = time.monotonic  # one name for the tests to drive the progress cadence with


class ExportError(CheckpointError):
    """The export cannot be done as asked (nothing selected, unsupported dtype, bad target)."""


class ExportExistsError(ExportError):
    """Files the export would write exist already (overwrite with force=True)."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        more = f" (and {len(paths) - 1} more)" if len(paths) > 1 else ""
        super().__init__(Message(f"{paths[0]} exists{more}", Hint(Fix.FORCE)))


@dataclass(frozen=True, eq=False)
class ExportItem:
    """One tensor to write: where it goes and as which dtype."""

    name: str
    info: TensorInfo
    target: str  # npy: file name in the folder; npz: key (member without .npy); safetensors: key
    dtype: str  # torch dtype name of the values written
    np_dtype: np.dtype
    note: str | None = None
    expand: bool = False  # a view that repeats its storage, written expanded as the user asked

    @property
    def nbytes(self) -> int:
        return self.info.numel * self.np_dtype.itemsize


@dataclass(eq=False)
class ExportPlan:
    """What an export will write; built from metadata only."""

    format: str
    out: str  # the folder (npy) or the file (npz, safetensors, a single .npy)
    items: list[ExportItem]
    notes: list[str] = field(default_factory=list)
    single_file: bool = False  # npy written to one .npy file rather than a folder

    @property
    def total_bytes(self) -> int:
        return sum(item.nbytes for item in self.items)

    def final_paths(self) -> list[str]:
        """Every path the export creates or replaces."""
        if self.format != "npy" or self.single_file:
            return [self.out]
        return [os.path.join(self.out, item.target) for item in self.items] + [os.path.join(self.out, MANIFEST)]

    def existing(self) -> list[str]:
        """The final paths that exist already (the GUI asks before replacing them)."""
        if self.format != "npy" or self.single_file:
            return [p for p in self.final_paths() if os.path.lexists(p)]
        try:  # one listing of the folder, not a look-up per file (200,000 of them)
            present = set(os.listdir(self.out))
        except FileNotFoundError:
            return []
        except OSError:  # not a folder, not readable: each path looked up, as for a single file
            return [p for p in self.final_paths() if os.path.lexists(p)]
        return [p for p in self.final_paths() if os.path.basename(p) in present]

    def staged(self) -> bool:
        """Whether the export writes a new folder of .npy files: staged beside it, renamed into place whole."""
        return self.format == "npy" and not self.single_file and not os.path.lexists(self.out)


@dataclass
class ExportResult:
    """What was written: the output path, name -> file/key, notes about dtypes and renamed keys."""

    format: str
    out: str
    files: dict[str, str]
    notes: list[str]
    bytes_written: int
    manifest: str | None = None


# -- choosing tensors ------------------------------------------------------------------------------


def exported_entries(ckpt: Checkpoint, dequantize: bool = False) -> list[TensorEntry]:
    """What an export of `ckpt` writes: the tensors the file stores (a quantized weight's raw parts, bit for
    bit), or with `dequantize` its logical tensors instead of their parts (the real weights)."""
    if dequantize:
        return list(ckpt.tensors())
    return [e for e in ckpt.tensors(with_parts=True) if e.info.quant is None]


def select_tensors(ckpt: Checkpoint, keys: Sequence[str] | None = None, dequantize: bool = False) -> list[TensorEntry]:
    """The tensors named by `keys` (exact names or fnmatch globs), in file order; all when `keys` is empty.
    A quantized weight is its stored parts (its name selects them), or, with `dequantize`, its logical tensor."""
    entries = exported_entries(ckpt, dequantize)
    if not keys:
        return list(entries)
    chosen: set[int] = set()
    for key in keys:
        matched = [i for i, e in enumerate(entries) if e.name == key or fnmatch.fnmatchcase(e.name, key)
                   or (e.info.part_of is not None and (e.info.part_of == key or fnmatch.fnmatchcase(e.info.part_of, key)))]
        if not matched:
            raise ExportError(Message(f"no tensor matches {printable(key)!r}", Hint(Fix.NAMES)))
        chosen.update(matched)
    return [entries[i] for i in sorted(chosen)]


def entries_below(ckpt: Checkpoint, nodes: Iterable[Node], dequantize: bool = False) -> list[TensorEntry]:
    """The tensors at or below `nodes` (tree selection: tensors and containers), in file order, once each; a
    quantized weight selected is its parts (with `dequantize`: its logical tensor)."""
    wanted = {id(n) for node in nodes for n in node.walk() if n.kind == "tensor"}
    owners = {e.name for e in ckpt.tensors() if id(e.node) in wanted and e.info.quant is not None}
    return [e for e in exported_entries(ckpt, dequantize) if id(e.node) in wanted or e.info.part_of in owners]


# -- planning --------------------------------------------------------------------------------------


def guess_format(out: str) -> str:
    """npz/safetensors/npy from OUT's suffix; an existing folder, a trailing slash or no suffix: npy folder."""
    if out.endswith(("/", os.sep)) or os.path.isdir(out):
        return "npy"
    return _SUFFIXES.get(os.path.splitext(out)[1].lower(), "npy")


def _dtype_choice(info: TensorInfo, fmt: str, exact: bool) -> tuple[str, str | None]:
    """(torch dtype name written, note or None) for a tensor of `info.dtype` exported as `fmt`."""
    name = dtypes.canonical(info.dtype)
    if not dtypes.is_known(name):
        raise ExportError(f"cannot export dtype {name}")
    if dtypes.is_quantized(name):
        q = info.extra.get("quantization") or {}
        params = [p for p in q.get("params", ()) if isinstance(p, int | float)]
        detail = f" ({q.get('scheme', 'unknown scheme')}, scale/zero point {tuple(params)})" if params else ""
        stored = dtypes.storage_numpy_dtype(name).name
        return stored, f"{name} written as its stored integers ({stored}){detail}, not dequantized"
    if name in ("complex32", "bcomplex32"):
        return "complex64", f"{name} widened to complex64 (exact)"
    if name in npy.ML_DTYPE_NAMES:
        if fmt == "safetensors" or exact:
            return name, None
        return "float32", Message(f"{name} converted to float32 (exact values)", Hint(Fix.EXACT_DTYPES))
    np_name = dtypes.storage_numpy_dtype(name).name
    if np_name != name:  # packed sub-byte and bits types: no NumPy or safetensors equivalent
        return np_name, f"{name} written as raw {np_name} (no NumPy type holds it)"
    return name, None


def np_dtype_of(torch_name: str) -> np.dtype:
    """The NumPy dtype of values written as torch dtype `torch_name`."""
    return dtypes.numpy_dtype(torch_name) or dtypes.storage_numpy_dtype(torch_name)


DEQUANTIZED_DTYPES = ("float32", "bfloat16")


def _around(note: str, before: str = "", after: str = "") -> str:
    """`before` and `after` around a note's reason (the fixes a core message carries kept after them)."""
    return rephrased(note, lambda said: f"{before}{said}{after}")


def plan_export(entries: Sequence[TensorEntry], out: str | os.PathLike[str], fmt: str | None = None, *,
                exact_dtypes: bool = False, expand_repeats: bool = False,
                dequantized_dtype: str = "float32") -> ExportPlan:
    """Decide targets, dtypes and notes for exporting `entries` to `out` (reads no tensor bytes).

    A quantized weight's logical tensor among `entries` is written dequantized, as `dequantized_dtype`
    (float32: its values as computed; bfloat16: rounded to nearest even, as torch's `.to()` rounds).

    A view that repeats its storage (`values.repeats`: stride 0, overlapping strides) would write more than
    the file stores: refused in one line, its expanded size first, unless `expand_repeats`."""
    out = os.fspath(out)
    if not out.strip():
        raise ExportError("choose where to save the export")
    fmt = fmt or guess_format(out)
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r} (choose from {', '.join(FORMATS)})")
    single = fmt == "npy" and out.lower().endswith(".npy") and not os.path.isdir(out)
    out = os.path.abspath(out)
    if fmt != "npy" and os.path.isdir(out):
        raise ExportError(f"{out} is a folder; a .{fmt} export needs a file name")
    notes: list[str] = []
    usable = []
    for entry in entries:
        if reason := _unreadable(entry.info):
            notes.append(f"skipped {printable(entry.name)}: {reason}")
        else:
            usable.append(entry)
    repeating = {id(e): found for e in usable if (found := repeats(e.info)) is not None}
    if repeating and not expand_repeats:
        first = next(e for e in usable if id(e) in repeating)
        found = repeating[id(first)]
        more = f" (and {len(repeating) - 1} more)" if len(repeating) > 1 else ""
        raise ExportError(Message(f"cannot export {printable(first.name)}{more}: it "
                                  f"{found.describe(first.info.dtype)}", Hint(Fix.EXPAND_REPEATS), Hint(Fix.LEAVE_OUT)))
    if not usable:
        raise ExportError("nothing to export: no readable tensor selected" + (f" ({notes[0]})" if notes else ""))
    if single and len(usable) != 1:
        raise ExportError(f"a .npy file holds one tensor and {len(usable)} are selected; give a folder")
    items = []
    targets = _targets([e.name for e in usable], fmt, single, os.path.basename(out))
    if dequantized_dtype not in DEQUANTIZED_DTYPES:
        raise ExportError(f"cannot write dequantized weights as {dequantized_dtype} (float32 or bfloat16)")
    for entry, target in zip(usable, targets, strict=True):
        note: str | None
        if entry.info.quant is not None:
            dtype, note = dequantized_dtype, f"dequantized from its {entry.info.quant.label} parts"
        else:
            dtype, note = _dtype_choice(entry.info, fmt, exact_dtypes)
        shown = printable(entry.name)
        found = repeating.get(id(entry))
        if found is not None:
            expanded = f"written expanded, as asked: it {found.describe(entry.info.dtype)}"
            note = _around(note, after=f"; {expanded}") if note else expanded
        items.append(ExportItem(entry.name, entry.info, target, dtype, np_dtype_of(dtype),
                                _around(note, before=f"{shown}: ") if note else None,
                                expand=found is not None))
        if fmt != "npy" and target != entry.name:
            notes.append(f"'{shown}' stored under key '{printable(target)}' (unsafe or duplicate name)")
    if fmt == "safetensors" and (refused := [i for i in items if i.dtype not in st.CODES]):
        shown = ", ".join(printable(i.name) for i in refused[:3]) + (f" and {len(refused) - 3} more" if len(refused) > 3 else "")
        raise ExportError(Message(f"safetensors has no {refused[0].dtype} dtype ({shown}): export to npy/npz",
                                  Hint(Fix.LEAVE_OUT)))
    notes.extend(item.note for item in items if item.note)
    if exact_dtypes and fmt in ("npy", "npz") and any(i.dtype in npy.ML_DTYPE_NAMES for i in items):
        notes.append("bfloat16/float8 arrays load with np.load after `import ml_dtypes`")
    return ExportPlan(fmt, out, items, notes, single)


def _unreadable(info: TensorInfo) -> str | None:
    """Why the values of `info` cannot be read (the same checks as `values`), or None."""
    if info.broken:
        return info.broken
    if info.storage is None:
        return "saved without data"
    if info.storage.broken:
        return info.storage.broken
    return f"storage '{info.storage.key}' has no data" if info.storage.source is None else None


def _targets(names: list[str], fmt: str, single: bool, out_name: str) -> list[str]:
    """File names (npy) or keys (npz, safetensors) for `names`: safe, unique, deterministic."""
    if single:
        return [out_name]
    if fmt == "npy":
        # File systems may ignore case: 'W.npy' and 'w.npy' must not land on one file.
        taken = Deduplicator(casefold=True, reserved=(MANIFEST,))
        candidates = [safe_file_stem(name) for name in names]
        suffix = ".npy"
    else:
        taken = Deduplicator(reserved=("__metadata__",) if fmt == "safetensors" else ())
        # safetensors keys are JSON strings (any name is safe); npz keys become zip member paths.
        candidates = [n if fmt == "safetensors" or is_safe_member(n) else safe_file_stem(n) for n in names]
        suffix = ""
    out: list[str | None] = [None] * len(names)
    # Names usable as they are go first, so a rewritten hostile name never pushes a plain one aside.
    for keep_first in (True, False):
        for i, (name, stem) in enumerate(zip(names, candidates, strict=True)):
            if (stem == name) is keep_first:
                out[i] = taken.take(stem, suffix)
    return [t for t in out if t is not None]


# The copy loop reads 256 Ki elements at a time (512 KiB of bf16): buffers the allocator reuses. Reads of
# 4 Mi elements cost a fresh mapping and its page faults each time: the same export took 2.5x as long.
EXPORT_CHUNK_ELEMS = min(DEFAULT_CHUNK_ELEMS, 1 << 18)

# -- writing ---------------------------------------------------------------------------------------


def item_values(item: ExportItem, chunk_elems: int, convert: bool = True) -> Iterator[np.ndarray]:
    """The item's logical values as chunks (of the dtype written unless `convert` is False); checks the count."""
    count = 0
    for chunk in iter_chunks(item.info, chunk_elems, expand=item.expand):
        if convert and chunk.dtype != item.np_dtype:
            chunk = chunk.astype(item.np_dtype)
        count += chunk.size
        yield chunk
    if count != item.info.numel:
        raise ExportError(f"{item.name}: read {plural(count, 'value')}, expected {item.info.numel}")


def check_free_space(plan: ExportPlan, folder: str) -> None:
    """Refuse, before writing anything, an export larger than the free space where it goes."""
    probe = os.path.abspath(folder)
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # no figure to compare with: the writes themselves will say ENOSPC
    need = plan.total_bytes
    if need > free:
        raise ExportError(f"not enough space: the export writes {human_bytes(need)} ({need:,} bytes) and "
                          f"{probe} has {human_bytes(free)} ({free:,} bytes) free")


def _finish_file(fh: typing.IO[bytes]) -> None:
    fh.flush()
    os.fsync(fh.fileno())  # the bytes are on disk before the name says the file is complete
    fh.close()


ItemWriter = Callable[[ExportPlan, str, Temps, list[tuple[str, str]], int], Generator[tuple[ExportItem, int], None, None]]
"""Writes a plan's items into temporary files of `Temps` in the folder, each to be renamed to its final name
(appended to the list), given the chunk size; yields (item, bytes) as it writes."""


def run_export(plan: ExportPlan, *, force: bool = False, token: CancelToken | None = None,
               chunk_elems: int = EXPORT_CHUNK_ELEMS,
               writer: ItemWriter | None = None) -> Generator[Progress, None, ExportResult]:
    """Write `plan`, yielding Progress in bytes; returns the ExportResult. Cancelling removes temp files.

    A new folder of .npy files is written in a staging folder beside it and renamed into place whole; any
    other export writes temporary files renamed one by one (`temps.py`). Either way every byte is on disk
    before a final name says the file is complete. `writer`: who writes the items' bytes (default: this
    process, as the format writes them; an export on workers writes the same bytes where the caller laid them
    out, see `export.placed`, into temporary files renamed one by one)."""
    token = token or CancelToken()
    if not force and (existing := plan.existing()):
        raise ExportExistsError(existing)
    staged = plan.staged() and writer is None
    folder = plan.out if plan.format == "npy" and not plan.single_file else os.path.dirname(plan.out)
    where = os.path.dirname(os.path.abspath(plan.out.rstrip(os.sep) or plan.out)) if staged else folder
    check_free_space(plan, where)
    made = _missing_folders(where)
    try:
        os.makedirs(where, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create folder {where}: {exc.strerror or exc}") from None
    files = len(plan.items) if plan.format == "npy" and not plan.single_file else 1
    temps = Temps(whole_filesystem=files > SYNC_BATCH and syncfs_available())
    total = plan.total_bytes
    done = 0
    renames: list[tuple[str, str]] = []
    placed: list[str] = []
    chunks: Generator[tuple[ExportItem, int], None, None] | None = None
    try:
        if staged:
            write_to = temps.stage(where)
        else:
            write_to = folder
            if folder != where or not os.path.isdir(folder):
                os.makedirs(folder, exist_ok=True)
        if writer is None:
            writer = {"npy": _write_npy_files, "npz": _write_npz, "safetensors": _write_safetensors}[plan.format]
        chunks = writer(plan, write_to, temps, renames, chunk_elems)
        # The token is checked for every chunk; progress is reported at most every REPORT_SECONDS (a
        # report per tiny tensor cost more than its write, and flooded the window with queued signals).
        next_report = _clock()
        for item, nbytes in chunks:
            token.check()
            done += nbytes
            now = _clock()
            if now >= next_report:
                next_report = now + REPORT_SECONDS
                yield Progress(done, total, f"writing {elide(item.name, NAME_IN_PROGRESS)}")
        token.check()
        manifest = _write_manifest(plan, write_to, temps, renames)
        temps.sync_all()
        if staged:
            yield Progress(done, total, "moving the folder into place")
            _place_folder(plan, temps, force)
            placed.append(plan.out)
            manifest = os.path.join(plan.out, MANIFEST)
        else:
            yield Progress(done, total, f"moving {len(renames):,} files into place" if len(renames) > 1
                           else "moving the file into place")
            if not force and (existing := [dst for _, dst in renames if os.path.lexists(dst)]):
                raise ExportExistsError(existing)  # appeared while we were writing
            for i, (src, dst) in enumerate(renames):
                if i % 1024 == 1023:
                    token.check()
                    now = _clock()
                    if now >= next_report:
                        next_report = now + REPORT_SECONDS
                        yield Progress(done, total, f"moved {i:,} of {plural(len(renames), 'file')} into place")
                os.replace(src, dst)
                del temps.paths[src]
                placed.append(dst)
        temps.shutdown()
    except BaseException as exc:  # Cancelled, GeneratorExit (worker closed us), errors, Ctrl-C
        if chunks is not None:
            chunks.close()  # closes the open temporary file before it is removed
        temps.discard()
        for dst in placed:  # stopped while moving files into place: no export is left half there
            with contextlib.suppress(OSError):
                os.unlink(dst) if not os.path.isdir(dst) else shutil.rmtree(dst)
        for made_folder in made:  # only if still empty: never remove what we did not create
            with contextlib.suppress(OSError):
                os.rmdir(made_folder)
        if isinstance(exc, OSError) and not isinstance(exc, CheckpointError):
            raise ExportError(f"cannot write {plan.out}: {exc.strerror or exc}") from exc
        raise
    out_folder = plan.out if staged else folder
    files_written = {item.name: (os.path.join(out_folder, item.target) if plan.format == "npy" else item.target)
                     for item in plan.items}
    return ExportResult(plan.format, plan.out, files_written, list(plan.notes), done, manifest)


def _missing_folders(folder: str) -> list[str]:
    """The folders `os.makedirs(folder)` would create, deepest first (removed again if the export stops)."""
    out = []
    path = os.path.abspath(folder)
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        out.append(path)
        path = os.path.dirname(path)
    return out


def _place_folder(plan: ExportPlan, temps: Temps, force: bool) -> None:
    """Rename the staging folder to the export's folder, once every file in it is durable. A folder that
    appeared there meanwhile: refused, or (force) the files moved into it one by one."""
    staging = temps.staging
    assert staging is not None
    target = plan.out.rstrip(os.sep) or plan.out
    if os.path.lexists(target):
        if not force:
            raise ExportExistsError([target])
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(target, name))
        os.rmdir(staging)
    else:
        os.rename(staging, target)
    temps.staging = None
    sync_folder(os.path.dirname(os.path.abspath(target)))  # the new name is on disk too


def export_tensors(entries: Sequence[TensorEntry], out: str | os.PathLike[str], fmt: str | None = None, *,
                   exact_dtypes: bool = False, force: bool = False, token: CancelToken | None = None,
                   chunk_elems: int = EXPORT_CHUNK_ELEMS,
                   expand_repeats: bool = False) -> Generator[Progress, None, ExportResult]:
    """Plan and run an export in one generator (the GUI's worker job)."""
    plan = plan_export(entries, out, fmt, exact_dtypes=exact_dtypes, expand_repeats=expand_repeats)
    return (yield from run_export(plan, force=force, token=token, chunk_elems=chunk_elems))


def _tensor_error(item: ExportItem, exc: Exception) -> ExportError:
    return ExportError(f"cannot export {item.name!r}: {exc}")


def _write_npy_files(plan: ExportPlan, folder: str, temps: Temps, renames: list[tuple[str, str]],
                     chunk_elems: int) -> Generator[tuple[ExportItem, int], None, None]:
    """Each item as a .npy file: small ones read at once from windows of the file and written in one call,
    others streamed through a `BlockWriter`; in the staging folder under their final names, or as temporary
    files renamed later."""
    return read_ahead(lambda ahead: _npy_files(plan, folder, temps, renames, chunk_elems, ahead))


def _npy_files(plan: ExportPlan, folder: str, temps: Temps, renames: list[tuple[str, str]], chunk_elems: int,
               ahead: ReadAhead) -> Generator[tuple[ExportItem, int], None, None]:
    staged = temps.staging is not None
    for item in plan.items:
        descr = npy.header_descr(item.np_dtype, item.dtype)
        small = _read_small(item, ahead)
        if staged:
            path, fd = os.path.join(folder, item.target), temps.create_staged(item.target)
        else:
            path, fd = temps.create_fd(folder)
        if small is not None:
            try:
                export_io.write_all(fd, npy.npy_bytes(descr, item.info.shape, small))
            except BaseException:
                os.close(fd)
                raise
            temps.sync_later(fd, folder)
            yield item, small.nbytes
        else:
            writer = BlockWriter(fd, item.nbytes + 128, direct=item.nbytes >= export_io.DIRECT_MIN)
            try:
                yield from named_errors(item, npy.write_npy_blocks(writer, descr, item.info.shape, item.np_dtype,
                                                               item_values(item, chunk_elems, convert=False)))
                # The rest, then made durable with the others (all before any name says one is complete).
                temps.sync_later(writer.finish(), folder)
            finally:
                writer.abort()  # no write left in flight when the temporary file is removed
        if not staged:
            renames.append((path, plan.out if plan.single_file else os.path.join(folder, item.target)))


def _read_small(item: ExportItem, ahead: ReadAhead) -> np.ndarray | None:
    """The bytes of a small item's .npy values (converted to the dtype written), read at once; None for an item
    the streaming path writes (large, expanded, not plainly stored)."""
    if item.expand or item.nbytes > SMALL_FILE_BYTES:
        return None
    try:
        values = read_small(item.info, item.info.numel, ahead)
    except (CheckpointError, OSError):
        raise
    except Exception as exc:  # a value-reading bug still reaches the user as one line naming the tensor
        raise _tensor_error(item, exc) from exc
    if values is None:
        return None
    if values.size != item.info.numel:
        raise ExportError(f"{item.name}: read {plural(values.size, 'value')}, expected {item.info.numel}")
    return export_io.converted_bytes(values, item.np_dtype)


def _write_npz(plan: ExportPlan, folder: str, temps: Temps, renames: list[tuple[str, str]],
               chunk_elems: int) -> Generator[tuple[ExportItem, int], None, None]:
    path, fh = temps.create(folder)
    with fh:
        with zipfile.ZipFile(fh, "w", allowZip64=True) as zf:
            for item in plan.items:
                with npy.open_npz_member(zf, item.target) as member:
                    descr = npy.header_descr(item.np_dtype, item.dtype)
                    yield from named_errors(item, npy.write_npy(member, descr, item.info.shape,
                                                            item_values(item, chunk_elems)))
        _finish_file(fh)
    renames.append((path, plan.out))


def safetensors_layout(plan: ExportPlan) -> tuple[bytes, list[ExportItem]]:
    """A safetensors export's header (length prefix included) and its items in the order their bytes follow it."""
    by_key = {item.target: item for item in plan.items}
    ordered = st.layout([st.Entry(i.target, i.dtype, i.info.shape, i.nbytes) for i in plan.items])
    metadata = {"format": "pt"}
    for item in plan.items:
        if q := item.info.extra.get("quantization"):
            metadata[f"ckptview.quantization.{item.target}"] = json.dumps(q, default=str)
    return st.header_bytes(ordered, metadata), [by_key[entry.key] for entry in ordered]


def _write_safetensors(plan: ExportPlan, folder: str, temps: Temps, renames: list[tuple[str, str]],
                       chunk_elems: int) -> Generator[tuple[ExportItem, int], None, None]:
    header, ordered = safetensors_layout(plan)
    path, fd = temps.create_fd(folder)
    size = len(header) + plan.total_bytes
    writer = BlockWriter(fd, size, direct=size >= export_io.DIRECT_MIN)
    try:
        writer.write(header)
        for item in ordered:
            yield from named_errors(item, st.write_tensor_blocks(writer, item.np_dtype,
                                                                 item_values(item, chunk_elems, convert=False)))
        writer.close()
    finally:
        writer.abort()
    renames.append((path, plan.out))


def named_errors(item: ExportItem, written: Iterator[int]) -> Iterator[tuple[ExportItem, int]]:
    """Pair each chunk's byte count with its item; reading errors name the tensor."""
    try:
        for nbytes in written:
            yield item, nbytes
    except (CheckpointError, Cancelled, OSError):
        raise
    except Exception as exc:  # a value-reading bug still reaches the user as one line naming the tensor
        raise _tensor_error(item, exc) from exc


def _write_manifest(plan: ExportPlan, folder: str, temps: Temps, renames: list[tuple[str, str]]) -> str | None:
    """manifest.json beside a folder of .npy files: tensor name -> file, dtypes and notes."""
    if plan.format != "npy" or plan.single_file:
        return None
    tensors = [
        {"name": item.name, "file": item.target, "dtype": item.dtype,
         "source_dtype": dtypes.canonical(item.info.dtype), "shape": list(item.info.shape),
         **({"note": item.note} if item.note else {})}
        for item in plan.items
    ]
    # {"format", "tensors", "notes"}, one tensor a line, each by the C encoder (an indented dump runs the
    # pure-Python encoder: 26 s for 200,000 tensors).
    lines = ",\n ".join(json.dumps(t, ensure_ascii=True) for t in tensors)
    text = (f'{{"format": "npy",\n "tensors": [\n {lines}\n ],\n'
            f' "notes": {json.dumps(plan.notes, ensure_ascii=True)}\n}}\n')
    final = os.path.join(folder, MANIFEST)
    if temps.staging is not None:
        fd = temps.create_staged(MANIFEST)
        try:
            export_io.write_all(fd, text.encode("ascii"))
        except BaseException:
            os.close(fd)
            raise
        temps.sync_later(fd, folder)
        return final
    path, fh = temps.create(folder)
    with fh:
        fh.write(text.encode("ascii"))
        _finish_file(fh)
    renames.append((path, final))
    return final

