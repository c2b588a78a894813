"""Write an export file in large aligned blocks: values converted straight into the block, one write in flight.

An export is bound by writing: a 525 MB bf16 tensor becomes 1.05 GB of float32. `BlockWriter` fills a
block (8 MiB) with converted values, with no temporary array, hands it to a writer thread and fills the
other block meanwhile, so reading, converting and writing overlap and memory stays at two blocks. A file
of at least `DIRECT_MIN` bytes is written with `O_DIRECT` where the system has it: the bytes go from the
block to the disk without a copy into the page cache (whose copy, and the flush that `fsync` then waits
for, were most of the time of a large export, and which only evicts the user's other files). Where
`O_DIRECT` is refused (tmpfs, some network file systems) the same blocks go through the page cache.
`close()` writes the rest and calls `os.fsync`: the bytes are on disk before the export renames the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

ALIGN = 4096  # offsets, lengths and addresses of O_DIRECT writes are multiples of this
BLOCK_BYTES = 8 << 20  # one block; two are held
DIRECT_MIN = 16 << 20  # smaller files go through the page cache (O_DIRECT pays a disk round trip per write)
O_DIRECT = getattr(os, "O_DIRECT", 0)

_write = os.write  # one name for the tests to fail writes with



def _aligned_block(nbytes: int) -> np.ndarray:
    """A uint8 array of `nbytes` (uninitialised) whose address is a multiple of ALIGN."""
    import numpy as np

    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGN
    return raw[start : start + nbytes]


def _set_direct(fd: int, on: bool) -> bool:
    """Turn O_DIRECT on or off for `fd`; False where the file system refuses it (then writes are cached)."""
    import fcntl  # POSIX only, as O_DIRECT is

    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, (flags | O_DIRECT) if on else (flags & ~O_DIRECT))
    except OSError:
        return False
    return on


def _is_bf16(dtype: np.dtype) -> bool:
    return dtype.name == "bfloat16" and dtype.itemsize == 2 and dtype.isnative


def _convert(src: np.ndarray, dst: np.ndarray, dtype: np.dtype, shift: bool) -> None:
    """Write `src` as `dtype` into the bytes `dst`, in one vectorised pass (bf16 -> f32: bits shifted, NaNs kept)."""
    import numpy as np

    if shift:
        np.left_shift(src.view(np.uint16), 16, out=dst.view(np.uint32), dtype=np.uint32)
    else:
        np.copyto(dst.view(dtype), src, casting="unsafe")


def converted_bytes(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`values` (C order) as the bytes of `dtype`, converted as `BlockWriter.write_values` converts them, in one
    array (for a file small enough to be written in one call)."""
    import numpy as np

    src = values.reshape(-1)
    out = np.empty(src.size * dtype.itemsize, dtype=np.uint8)
    _convert(src, out, dtype, _is_bf16(src.dtype) and dtype == np.dtype(np.float32))
    return out


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of `data` to `fd` (a write may take part of it)."""
    view = memoryview(data)
    while view:
        view = view[_write(fd, view):]


class BlockWriter:
    """Sequential writer over a descriptor it owns: `write` bytes, `write_values` converted values, `close`."""

    def __init__(self, fd: int, size: int, *, direct: bool = False) -> None:
        """Write to `fd` a file of about `size` bytes (blocks no larger than it needs); `direct`: try O_DIRECT."""
        self.fd = fd
        block = max(ALIGN, min(BLOCK_BYTES, size + ALIGN - 1) // ALIGN * ALIGN)
        try:  # the second block is made when the first is handed to the writer thread (never, for a small file)
            self._blocks = [_aligned_block(block)]
        except BaseException:  # MemoryError, Ctrl-C: the descriptor is ours to close
            os.close(fd)
            raise
        self._cur = 0
        self._fill = 0
        self._direct = bool(direct and O_DIRECT) and _set_direct(fd, True)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def direct(self) -> bool:
        """Whether writes still bypass the page cache."""
        return self._direct

    # -- filling --------------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append raw bytes (a header); returns their length (file-like, for NumPy's header writer)."""
        import numpy as np

        src = np.frombuffer(data, dtype=np.uint8)
        done = 0
        while done < src.size:
            block = self._blocks[self._cur]
            n = min(src.size - done, block.size - self._fill)
            block[self._fill : self._fill + n] = src[done : done + n]
            self._fill += n
            done += n
            if self._fill == block.size:
                self._submit()
        return int(src.size)

    def write_values(self, values: np.ndarray, dtype: np.dtype) -> int:
        """Append `values` (C order) as `dtype`, converted straight into the block; returns the bytes added."""
        import numpy as np

        src = values.reshape(-1)
        size = dtype.itemsize
        shift = _is_bf16(src.dtype) and dtype == np.dtype(np.float32)  # bf16 -> f32: the bits, widened
        done = 0
        while done < src.size:
            block = self._blocks[self._cur]
            fit = (block.size - self._fill) // size
            if fit == 0:  # a value straddles two blocks: its bytes go through `write`
                one = np.empty(size, dtype=np.uint8)
                _convert(src[done : done + 1], one, dtype, shift)
                self.write(one.data)
                done += 1
                continue
            n = min(fit, src.size - done)
            _convert(src[done : done + n], block[self._fill : self._fill + n * size], dtype, shift)
            self._fill += n * size
            done += n
            if self._fill == block.size:
                self._submit()
        return src.size * size

    # -- writing --------------------------------------------------------------------------------

    def _submit(self) -> None:
        """Hand the full part of the current block to the writer thread; switch to the other block."""
        self._wait()
        view = self._blocks[self._cur].data[: self._fill]
        if len(self._blocks) == 1:
            self._blocks.append(_aligned_block(self._blocks[0].size))
        self._cur ^= 1
        self._fill = 0
        self._thread = threading.Thread(target=self._run, args=(view,), name="ckptview-export-write", daemon=True)
        self._thread.start()

    def _run(self, view: memoryview) -> None:
        try:
            self._write_all(view)
        except BaseException as exc:  # handed to the main thread at its next wait
            self._error = exc

    def _wait(self) -> None:
        """Wait for the write in flight; raise its error, if any."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _write_all(self, view: memoryview) -> None:
        if self._direct:
            whole = len(view) // ALIGN * ALIGN
            try:
                done = 0
                while done < whole:
                    done += _write(self.fd, view[done:whole])
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # Alignment the file system will not take (a larger sector, a short write): the page cache.
                self._buffered()
                self._write_plain(view[done:])
                return
            if whole < len(view):  # the file's last, partial block
                self._buffered()
                view = view[whole:]
            else:
                return
        self._write_plain(view)

    def _write_plain(self, view: memoryview) -> None:
        done = 0
        while done < len(view):
            done += _write(self.fd, view[done:])

    def _buffered(self) -> None:
        """Stop bypassing the page cache for the rest of this file."""
        self._direct = False
        _set_direct(self.fd, False)

    def flush(self) -> None:
        """Write everything appended so far and wait for it.

        The rest is written by this thread: a file that fits in one block (most of a folder of tiny
        tensors) starts no writer thread at all (one started and joined per file cost more than its write).
        """
        self._wait()
        if self._fill:
            view = self._blocks[self._cur].data[: self._fill]
            self._fill = 0
            self._write_all(view)

    def close(self) -> None:
        """Write the rest, fsync and close: the bytes are on disk before the file is renamed into place."""
        try:
            self.flush()
            os.fsync(self.fd)
        finally:
            self.abort()

    def finish(self) -> int:
        """Write the rest and hand over the descriptor, not yet synced (the caller fsyncs and closes it)."""
        try:
            self.flush()
        except BaseException:
            self.abort()
            raise
        fd, self.fd = self.fd, -1
        self._thread = None
        return fd

    def abort(self) -> None:
        """Wait for a write in flight (never leave one running on a closed descriptor) and close."""
        thread, self._thread = self._thread, None
        if thread is not None:
            with contextlib.suppress(RuntimeError):  # interrupted before it started: nothing in flight
                thread.join()
        self._error = None
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
