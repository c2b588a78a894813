"""Helpers to compare ckptview's reading with torch's own, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np


def torch_bits(t: Any) -> np.ndarray:
    """A tensor's values as a NumPy array of their exact bits (same-width ints for dtypes numpy lacks)."""
    import torch

    t = t.detach().cpu()
    if t.is_quantized:
        t = t.int_repr()
    if t.dtype == torch.complex32:
        return t.to(torch.complex64).numpy()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.contiguous().view(torch.int16).numpy()
    if t.dtype.itemsize == 1 and t.dtype not in (torch.bool, torch.int8, torch.uint8):
        return t.contiguous().view(torch.uint8).numpy()
    if t.dtype in (torch.uint16, torch.uint32, torch.uint64):
        return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.dtype.itemsize]).numpy()
    return t.numpy()


def our_bits(a: np.ndarray) -> np.ndarray:
    """ckptview's values in the same bit representation as `torch_bits`."""
    a = np.array(a, order="C", copy=True)
    if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":  # float16, bfloat16
        return a.view(np.int16)
    if a.dtype.itemsize == 1 and a.dtype not in (np.bool_, np.int8, np.uint8):  # float8 variants
        return a.view(np.uint8)
    if a.dtype.kind == "u" and a.dtype.itemsize > 1:
        return a.view({2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize])
    return a


def same_values(ours: np.ndarray, theirs: Any) -> bool:
    """True when shape and every bit agree (NaN payloads included)."""
    a, b = our_bits(ours), torch_bits(theirs)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return a.tobytes() == np.array(b, order="C").astype(a.dtype).tobytes() or np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


def get_path(obj: Any, path: tuple) -> Any:
    """Follow a ckptview path into torch.load's result (dict keys, list indices, module attributes)."""
    for key in path:
        if isinstance(obj, dict):
            if key in obj:
                obj = obj[key]
            else:
                obj = next(v for k, v in obj.items() if repr(k) == key or str(k) == key)
        elif isinstance(obj, (list, tuple)):
            obj = obj[int(key)]
        else:
            obj = getattr(obj, key)
    return obj
