"""Tensors in the run worker from the safe reader's values: on a device, and placed in memory as a library's
own memory map would place them.

Libraries that load by assignment (transformers 5, diffusers) compute on their weights where safetensors'
memory map left them: at the file offset's place within a page, often off a 64-byte boundary. CPU matrix
kernels pick their path by alignment, so the same values at another address can round differently in the last
bit (a BERT pooler: 1.5e-8). `read_like_file` reads each weight into memory at the same place within a page as
the map would put it, so that a forward pass gives the library's own outputs bit for bit.
"""

from __future__ import annotations

import warnings
from typing import Any

from ckptview.core.read.values.reading import file_position, read_values
from ckptview.core.run.protocol import one_line

PAGE = 4096  # a memory map starts on a page: a byte's address within a page is its file offset's


def place_tensor(info: Any, device: str) -> tuple[Any, str]:
    """(tensor on `device`, '') from the safe reader's values, or (None, why it could not be placed)."""
    import torch

    dtype = getattr(torch, info.dtype, None)
    if dtype is None:
        return None, f"dtype {info.dtype} is unknown to this torch"
    if device == "meta":
        return torch.empty(tuple(info.shape), dtype=dtype, device="meta"), ""
    try:
        array = _read_values(info)
        tensor = numpy_to_torch(array, info.dtype)
        return tensor.to(device), ""
    except Exception as exc:  # noqa: BLE001 - e.g. float64 on mps, a broken record: report and go on
        return None, f"{info.dtype} on {device}: {one_line(exc)}"


def read_like_file(info: Any) -> Any:
    """A writable CPU tensor of the tensor's values, its first byte at its file offset's place within a page
    (as a memory map of the file would hold it); a plain copy where the bytes are not stored plainly."""
    import numpy as np
    import torch

    target = getattr(torch, info.dtype)
    position = file_position(info)
    if position is None:
        array = _read_values(info)
        array = np.array(array, copy=True, order="C")  # writable and contiguous: the model may keep it
        return numpy_to_torch(array, info.dtype)
    fmap, offset = position
    nbytes = info.nbytes
    block = np.empty(nbytes + PAGE, dtype=np.uint8)
    start = (offset - block.ctypes.data) % PAGE
    buffer = block[start:start + nbytes]
    fmap.readinto(offset, buffer.data)
    return torch.from_numpy(buffer).view(target).reshape(tuple(info.shape))


def _read_values(info: Any) -> Any:
    # A view that repeats its storage goes into the model's own parameter, which the build already sized:
    # the expansion costs what the architecture holds, not what the file declares.
    return read_values(info, expand=True)


def numpy_to_torch(array: Any, dtype_name: str) -> Any:
    """A CPU tensor over `array`'s values (bf16/fp8 through their bit patterns, without a float detour)."""
    import numpy as np
    import torch

    target = getattr(torch, dtype_name)
    if array.dtype.type.__module__ != "numpy":  # ml_dtypes: reinterpret the bits
        bits = np.ascontiguousarray(array).view(f"uint{array.dtype.itemsize * 8}")
        return torch.from_numpy(bits).view(target)
    with warnings.catch_warnings():
        # Read-only array views are fine: load_state_dict copies into the parameters, never writes here.
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(array)
    return tensor if tensor.dtype == target else tensor.to(target)
