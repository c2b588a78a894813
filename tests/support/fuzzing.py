"""Mutations of valid checkpoints and the property every reader must keep (shared by the fuzz test and
benchmarks/fuzz.py): open, list and read every tensor, or raise CheckpointError; nothing else."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from ckptview.commands.info import info_dict
from ckptview.core.errors import CheckpointError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import iter_chunks, read_values

MEMORY_LIMIT = 256 << 20  # bytes traced per example; the seeds are a few KB
EDGE = 600  # headers (pickles, zip local headers) sit at the start, the zip central directory at the end

# A position in the file: anywhere, near the start, or near the end.
position = st.one_of(st.floats(0, 1, exclude_max=True), st.integers(0, EDGE).map(lambda i: ("head", i)),
                     st.integers(1, EDGE).map(lambda i: ("tail", i)))
mutation = st.one_of(
    st.tuples(st.just("flip"), position, st.integers(0, 255)),
    st.tuples(st.just("set"), position, st.sampled_from([0, 1, 0x7F, 0x80, 0xFF])),
    st.tuples(st.just("cut"), position),
    st.tuples(st.just("dup"), position, st.integers(1, 64), position),
    st.tuples(st.just("drop"), position, st.integers(1, 64)),
)
mutations = st.lists(mutation, min_size=1, max_size=4)


def _at(pos: Any, size: int) -> int:
    if size == 0:
        return 0
    if isinstance(pos, float):
        return int(pos * size)
    where, i = pos
    return min(i, size - 1) if where == "head" else max(size - i, 0)


def mutate(data: bytes, ops: list[tuple]) -> bytes:
    """Apply flips, byte sets, truncations, duplicated and dropped chunks."""
    buf = bytearray(data)
    for op in ops:
        if not buf:
            break
        at = _at(op[1], len(buf))
        if op[0] == "flip":
            buf[at] ^= op[2] or 1
        elif op[0] == "set":
            buf[at] = op[2]
        elif op[0] == "cut":
            del buf[at:]
        elif op[0] == "dup":
            chunk = bytes(buf[at : at + op[2]])
            dest = _at(op[3], len(buf))
            buf[dest:dest] = chunk
        elif op[0] == "drop":
            del buf[at : at + op[2]]
    return bytes(buf)


def exercise(path: Path) -> str:
    """Open, describe and read everything; returns 'opened' or 'refused'. Any other exception escapes."""
    try:
        ckpt = open_checkpoint(path)
    except CheckpointError:
        return "refused"
    try:
        json.dumps(info_dict(ckpt), default=str)
        for entry in ckpt.tensors():
            try:
                if entry.info.nbytes <= 16 << 20:
                    read_values(entry.info)
                for _chunk in iter_chunks(entry.info, 1 << 12):
                    pass
            except CheckpointError:
                pass
    finally:
        ckpt.close()
    return "opened"


def exercise_bounded(path: Path, limit: int = MEMORY_LIMIT) -> tuple[str, int]:
    """`exercise` under tracemalloc: (outcome, peak traced bytes); AssertionError beyond `limit`."""
    tracemalloc.start()
    try:
        outcome = exercise(path)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= limit, f"{path.name}: {peak >> 20} MB traced"
    return outcome, peak


def mutate_member(zip_bytes: bytes, suffix: str, ops: list[tuple]) -> list[tuple[str, bytes]]:
    """The members of a zip with the one ending in `suffix` mutated (written back with a valid CRC,
    so the mutation reaches the pickle VM instead of stopping at the CRC check)."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        members = [(i.filename, zf.read(i)) for i in zf.infolist()]
    return [(n, mutate(d, ops) if n.endswith(suffix) else d) for n, d in members]
