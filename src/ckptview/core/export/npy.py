"""Stream tensors into `.npy` files and `.npz` archives without holding more than one chunk in memory."""

from __future__ import annotations

import functools
import io
import zipfile
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING

from ckptview.core.export.blocks import BlockWriter

if TYPE_CHECKING:
    import numpy as np

# ml_dtypes types whose `dtype.str` NumPy cannot read back ('<V2', '<f1'): their header names the type
# instead ('bfloat16'), which `np.load` understands once `import ml_dtypes` has registered it.
ML_DTYPE_NAMES = frozenset({
    "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
})

# A fixed timestamp makes two exports of the same tensors byte-identical.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def header_descr(dtype: np.dtype, torch_name: str) -> str:
    """The `descr` field of the .npy header for values of `dtype` (written as torch dtype `torch_name`)."""
    import numpy as np

    if torch_name in ML_DTYPE_NAMES:
        return torch_name
    descr = np.lib.format.dtype_to_descr(dtype)
    assert isinstance(descr, str)  # a plain dtype's descr is a string; structured dtypes are never written
    return descr


def write_header(fh: IO[bytes], descr: str, shape: tuple[int, ...]) -> None:
    """Write a .npy header (version 1.0, or 2.0 when the header is too long for 1.0)."""
    fh.write(_header(descr, tuple(int(s) for s in shape)))


@functools.lru_cache(maxsize=1024)
def _header(descr: str, shape: tuple[int, ...]) -> bytes:
    """The header bytes NumPy writes; kept for the next tensor of that dtype and shape (most tiny ones share)."""
    import numpy as np

    out = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    try:
        np.lib.format.write_array_header_1_0(out, header)
    except ValueError:  # header over 64 KiB (a shape with thousands of dimensions)
        out = io.BytesIO()
        np.lib.format.write_array_header_2_0(out, header)
    return out.getvalue()


def npy_bytes(descr: str, shape: tuple[int, ...], raw: np.ndarray) -> bytes:
    """A whole small .npy file: its header and `raw`, the values' bytes (`blocks.converted_bytes`)."""
    return _header(descr, tuple(int(s) for s in shape)) + raw.tobytes()


def write_npy(fh: IO[bytes], descr: str, shape: tuple[int, ...], chunks: Iterable[np.ndarray]) -> Iterator[int]:
    """Write one array as .npy: header, then each C-order chunk; yields the bytes of each chunk written."""
    import numpy as np

    write_header(fh, descr, shape)
    for chunk in chunks:
        # A uint8 view of the chunk's own buffer: no copy, and it works for ml_dtypes arrays too.
        raw = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
        fh.write(raw.data)
        yield raw.nbytes


def write_npy_blocks(writer: BlockWriter, descr: str, shape: tuple[int, ...], dtype: np.dtype,
                     chunks: Iterable[np.ndarray]) -> Iterator[int]:
    """Write one array as .npy through a BlockWriter, each chunk converted to `dtype` in place; yields bytes."""
    write_header(writer, descr, shape)  # type: ignore[arg-type]  # file-like enough: write() is all it uses
    for chunk in chunks:
        yield writer.write_values(chunk, dtype)


def open_npz_member(zf: zipfile.ZipFile, key: str) -> IO[bytes]:
    """A writable member `key + '.npy'` of an open zip (stored, zip64 so it may exceed 4 GiB)."""
    info = zipfile.ZipInfo(key + ".npy", date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_STORED  # like np.savez: members stay mappable and fast to read
    return zf.open(info, "w", force_zip64=True)
