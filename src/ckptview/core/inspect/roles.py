"""Which tensors of a model are learnable parameters and which are buffers (Qt-free, no torch).

torch counts a model's parameters as ``sum(p.numel() for p in model.parameters())``: buffers
(``running_mean``, ``num_batches_tracked``, ``inv_freq``, ...) are apart. A state dict does not say which
of its tensors were buffers, so ckptview uses what can be known:

1. A whole pickled module (``torch.save(model)``) says it: its ``_parameters`` and ``_buffers`` (the
   reader marks each tensor, and names the buffers left out of ``state_dict()``, the non-persistent ones);
   a ``.pt2`` says it in its graph signature.
2. Integer and boolean tensors are buffers: nothing learns them by gradient (step counters, position ids,
   masks, packed quantized weights kept as buffers).
3. The buffer names that torch's and the common libraries' modules register: `BUFFER_NAMES`, and
   one-element counters (`step`, `epoch`, ...: `COUNTER_NAMES`), whatever their dtype.

Everything else that is floating point (or complex, or a quantized dtype) counts as a parameter.
"""

from __future__ import annotations

import functools
from typing import Literal

from ckptview.core import dtypes
from ckptview.core.checkpoint import MODULE_PART, PathKey, ReprKey, TensorInfo

Role = Literal["parameter", "buffer"]
PARAMETER, NON_PERSISTENT = "parameter", "non-persistent buffer"  # values of `MODULE_PART`

# Buffers registered by torch.nn (BatchNorm/InstanceNorm running statistics and counter) and by common
# model code (rotary embeddings, cached position ids, attention masks kept as buffers).
BUFFER_NAMES = frozenset({
    "running_mean", "running_var", "num_batches_tracked", "inv_freq", "original_inv_freq", "cos_cached",
    "sin_cached", "position_ids", "token_type_ids", "masked_bias", "attn_mask", "causal_mask",
})

# One-element counters at any depth (a float `step` of Adam's state counts steps too).
COUNTER_NAMES = frozenset({"step", "global_step", "epoch", "iteration", "iter", "_step_count", "num_updates",
                           "steps", "current_epoch", "last_epoch"})

@functools.cache  # asked once per tensor of a listing, of a handful of dtype names
def learnable_dtype(dtype: str) -> bool:
    """True for the dtypes a parameter can have: floating point, complex, quantized."""
    return dtypes.is_known(dtype) and (
        dtypes.is_floating(dtype) or dtypes.is_complex(dtype) or dtypes.is_quantized(dtype))


def last_name(path: tuple[PathKey, ...]) -> str:
    """The attribute name a tensor had in its module: the last component of its last key."""
    if not path:
        return ""
    key = path[-1]
    if isinstance(key, ReprKey) or not isinstance(key, str):
        return str(key)
    return key[key.rfind(".") + 1:]  # rsplit's last part, without its list (100,000 names a listing)


def tensor_role(info: TensorInfo, path: tuple[PathKey, ...]) -> Role:
    """"parameter" or "buffer", by the rules of the module docstring."""
    extra = info.extra
    if extra:
        part = extra.get(MODULE_PART)
        if part is not None:
            return "parameter" if part == PARAMETER and learnable_dtype(info.dtype) else "buffer"
    if not learnable_dtype(info.dtype):
        return "buffer"
    name = last_name(path)
    if name in BUFFER_NAMES or name in COUNTER_NAMES and len(info.shape) <= 1 and info.numel == 1:
        return "buffer"
    return "parameter"


def is_non_persistent(info: TensorInfo) -> bool:
    """A buffer its module keeps out of ``state_dict()`` (known only from a pickled module or a .pt2)."""
    return info.extra.get(MODULE_PART) == NON_PERSISTENT if info.extra else False


def is_count(info: TensorInfo, path: tuple[PathKey, ...]) -> bool:
    """A tensor that counts rather than measures: integer and boolean tensors (``num_batches_tracked``, ids,
    masks) and one-element step counters of any dtype (Adam's float ``step``). A module's figures leave them
    out and show them on their own line: a counter at 1,000 would be every weight's max."""
    if not learnable_dtype(info.dtype):
        return True
    return info.numel == 1 and last_name(path) in COUNTER_NAMES
