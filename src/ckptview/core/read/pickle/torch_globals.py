"""Inert emulations of the globals torch writes into checkpoints, and the set considered safe.

The safe set follows what the installed torch's `torch.load(weights_only=True)` accepts by default: tensor
and parameter rebuild functions, storages, dtypes, layouts, `torch.Size`, `torch.device`,
`collections.OrderedDict` and a few builtins (a dtype a later torch added is safe from that torch on). Each emulation builds a plain value; nothing is imported.
"""

from __future__ import annotations

import collections
import importlib.metadata
import math
import re
from typing import Any

from ckptview.core import dtypes
from ckptview.core.checkpoint import Storage, TensorInfo
from ckptview.core.read.bytes.sources import MemorySource
from ckptview.core.read.pickle.safe_globals import (
    SINCE,
    TORCH_REGISTERED_GLOBALS,
    TORCH_WEIGHTS_ONLY_GLOBALS,
    TORCHSCRIPT_GLOBALS,
)
from ckptview.core.read.pickle.vm import Emulator, GlobalRef, StubObject

MAX_DIMS = 64


class DtypeValue(str):
    """A torch dtype referenced as a value (`torch.float32`): its canonical name."""

    def __repr__(self) -> str:
        return f"torch.{str(self)}"


class DeviceValue(str):
    """A `torch.device`: its string form."""

    def __repr__(self) -> str:
        return f"device(type='{self.split(':')[0]}'" + (f", index={self.split(':')[1]})" if ":" in self else ")")


class SizeValue(tuple[int, ...]):
    """A `torch.Size`."""

    def __repr__(self) -> str:
        return f"torch.Size([{', '.join(str(i) for i in self)}])"


class LayoutValue(str):
    """A torch constant referenced by name (a layout, qscheme or memory format)."""
    def __repr__(self) -> str:
        return f"torch.{str(self)}"


class StorageClass:
    """A storage class referenced in a persistent id (`torch.FloatStorage`, `torch.UntypedStorage`)."""

    def __init__(self, dotted: str, dtype: str) -> None:
        self.dotted, self.dtype = dotted, dtype

    def __repr__(self) -> str:
        return self.dotted


class BrokenValue:
    """A value the file describes inconsistently; shown with its reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<broken: {self.reason}>"


def _int_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > MAX_DIMS:
        raise ValueError(f"{what} must be a tuple of at most {MAX_DIMS} ints")
    out = tuple(value)
    for v in out:
        if type(v) is not int:  # bool and int subclasses are not sizes
            raise ValueError(f"{what} must hold ints")
    return out


def check_view(info: TensorInfo) -> None:
    """Mark `info` broken when its shape/stride/offset do not fit inside its storage."""
    shape, stride = info.shape, info.stride
    if len(stride) != len(shape):
        info.broken = f"shape {list(shape)} and stride {list(stride)} differ in length"
        return
    if info.offset < 0:
        info.broken = f"negative storage offset {info.offset}"
        return
    last = info.offset
    empty = False
    for size, step in zip(shape, stride, strict=True):
        if size < 0:
            info.broken = f"negative size in shape {list(shape)}"
            return
        if step < 0:
            info.broken = f"negative stride {list(stride)}"
            return
        if size == 0:
            empty = True
        last += (size - 1) * step
    storage = info.storage
    if storage is None or empty:
        return
    itemsize = dtypes.itemsize(info.dtype)
    needed = (last + 1) * itemsize
    if needed > storage.nbytes:
        info.broken = (
            f"shape {list(info.shape)} at offset {info.offset} needs {needed} bytes, "
            f"storage '{storage.key}' holds {storage.nbytes}"
        )


def _make_tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: str | None = None) -> TensorInfo:
    if not isinstance(storage, Storage):
        raise ValueError("tensor rebuilt from something that is not a storage")
    if not isinstance(offset, int):
        raise ValueError("storage offset must be an int")
    shape = _int_tuple(size, "size")
    if stride is None:  # legacy _rebuild_tensor with contiguous strides
        stride = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    strides = _int_tuple(stride, "stride")
    dtype = dtype or storage.dtype
    if dtype != storage.dtype and storage.dtype != "uint8":
        raise ValueError(f"tensor of {dtype} over a {storage.dtype} storage")
    # An untyped storage keeps its bytes as they are: one storage may back tensors of several dtypes
    # (a float8 tensor and its uint8 view), so the tensor's dtype is never written into the storage.
    info = TensorInfo(dtype=dtype, shape=shape, stride=strides, offset=offset, storage=storage)
    if storage.broken:
        info.broken = storage.broken
    else:
        check_view(info)
    return info


def _dtype_arg(value: Any) -> str:
    if isinstance(value, DtypeValue):
        return str(value)
    raise ValueError("expected a torch dtype")


# -- emulations ------------------------------------------------------------------------------------

def _rebuild_tensor(ref: GlobalRef, args: tuple[Any, ...]) -> TensorInfo:
    storage, offset, size, stride = args[:4]
    return _make_tensor(storage, offset, size, stride)


def _rebuild_tensor_v2(ref: GlobalRef, args: tuple[Any, ...]) -> TensorInfo:
    storage, offset, size, stride, requires_grad = args[:5]
    info = _make_tensor(storage, offset, size, stride)
    info.requires_grad = bool(requires_grad)
    if len(args) > 6 and isinstance(args[6], dict) and args[6]:
        info.set_extra("metadata", args[6])
    return info


def _rebuild_tensor_v3(ref: GlobalRef, args: tuple[Any, ...]) -> TensorInfo:
    storage, offset, size, stride, requires_grad, _hooks, dtype = args[:7]
    info = _make_tensor(storage, offset, size, stride, _dtype_arg(dtype))
    info.requires_grad = bool(requires_grad)
    return info


def _rebuild_parameter(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    data, requires_grad = args[0], args[1]
    if isinstance(data, TensorInfo):
        data.is_parameter = True
        data.requires_grad = bool(requires_grad)
    return data


def _rebuild_qtensor(ref: GlobalRef, args: tuple[Any, ...]) -> TensorInfo:
    storage, offset, size, stride, qparams, requires_grad = args[:6]
    info = _make_tensor(storage, offset, size, stride)
    info.requires_grad = bool(requires_grad)
    if isinstance(qparams, tuple) and qparams:
        scheme = str(qparams[0]).removeprefix("torch.")
        info.set_extra("quantization", {"scheme": scheme, "params": qparams[1:]})
    return info


def _rebuild_meta_or_wrapper(ref: GlobalRef, args: tuple[Any, ...]) -> TensorInfo:
    if ref.name == "_rebuild_meta_tensor_no_storage":
        dtype, size, stride, requires_grad = args[:4]
        device = "meta"
    else:  # _rebuild_wrapper_subclass(cls, dtype, size, stride, storage_offset, layout, device, requires_grad)
        dtype, size, stride, device, requires_grad = args[1], args[2], args[3], args[6], args[7]
    info = TensorInfo(dtype=_dtype_arg(dtype), shape=_int_tuple(size, "size"),
                      stride=_int_tuple(stride, "stride"), offset=0, storage=None,
                      requires_grad=bool(requires_grad))
    info.set_extra("device", str(device))  # no storage: shape and dtype only (values cannot be read)
    return info


def _rebuild_device_tensor_from_numpy(ref: GlobalRef, args: tuple[Any, ...]) -> TensorInfo:
    """XLA-style tensors are pickled as a NumPy array plus dtype and device: the bytes are in the pickle."""
    data, dtype, device, requires_grad = args[:4]
    dtype = _dtype_arg(dtype)
    array = data.array if isinstance(data, NumpyArray) else None
    if array is None:
        info = TensorInfo(dtype=dtype, shape=(), stride=(), offset=0, storage=None,
                          requires_grad=bool(requires_grad))
        info.set_extra("device", str(device))
        info.broken = "saved as a NumPy array this reader could not decode"
        return info
    contiguous = array.copy(order="C")
    storage = Storage(key="<in data.pkl>", dtype=dtype, numel=contiguous.size, device=str(device),
                      source=MemorySource(contiguous.tobytes()))
    info = _make_tensor(storage, 0, tuple(array.shape), None)
    info.requires_grad = bool(requires_grad)
    return info


def _rebuild_device_tensor_from_cpu_tensor(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    """MTIA/MAIA-style tensors: a CPU tensor plus the device it was saved from."""
    data, _dtype, device, requires_grad = args[:4]
    if isinstance(data, TensorInfo):
        if data.storage is not None:
            data.storage.device = str(device)
        data.requires_grad = bool(requires_grad)
    return data


def _rebuild_from_type_v2(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    func, new_type, func_args, state = args[:4]
    if not isinstance(func, GlobalRef):
        raise ValueError("rebuild function is not a global")
    emulate = EMULATORS.get(func.dotted)
    result = emulate(func, tuple(func_args)) if emulate else StubObject(func.dotted, tuple(func_args))
    if (isinstance(result, TensorInfo) and result.storage is None and isinstance(new_type, GlobalRef)
            and func.dotted == "torch._utils._rebuild_wrapper_subclass"):
        held = _wrapper_data(result, new_type.dotted, _members(state))
        if held is not None:
            return held
    if isinstance(result, TensorInfo) and isinstance(new_type, GlobalRef):
        if new_type.dotted == "torch.nn.parameter.Parameter":
            result.is_parameter = True
        elif new_type.dotted not in ("torch.Tensor", "torch._tensor.Tensor"):
            result.set_extra("subclass", new_type.dotted)
    return result


def _members(state: Any) -> dict[Any, Any]:
    """An object's pickled state as one dict (``__dict__``, or ``(__dict__, slots)``; a ShardedTensor's
    ``__getstate__`` tuple starts with its local shards)."""
    if isinstance(state, dict):
        return state
    if isinstance(state, tuple) and len(state) > 2 and isinstance(state[0], list):
        return {"_local_shards": state[0]}
    if isinstance(state, tuple) and len(state) == 2:
        out: dict[Any, Any] = {}
        for part in state:
            if isinstance(part, dict):
                out.update(part)
        return out
    return {}


def _wrapper_data(logical: TensorInfo, cls: str, members: dict[Any, Any]) -> Any:
    """What a wrapper tensor subclass's file holds, in place of its storage-less shell, or None.

    - a DTensor (FSDP2, tensor parallelism) or a ShardedTensor with one local shard (FSDP1's local
      `_flat_param`): this rank's local shard, its values readable, the global shape and class in `extra`;
    - a wrapper holding inner tensors (torchao's qdata/scale/zero_point, ...): an object of its class with
      those tensors (and its other attributes) as members, beside the logical shape and dtype.
    """
    local = members.get("_local_tensor")
    shards = members.get("_local_shards")  # a ShardedTensor (FSDP1's local `_flat_param`): this rank's shards
    if isinstance(shards, list):
        held = [_members(st.state).get("tensor") for st in shards if isinstance(st, StubObject)]
        if len(held) == 1 and isinstance(held[0], TensorInfo):
            local = held[0]
    if isinstance(local, TensorInfo):
        local.set_extra("subclass", cls)
        local.set_extra("global_shape", list(logical.shape))
        local.requires_grad = logical.requires_grad
        return local
    if not any(isinstance(v, TensorInfo) for v in members.values()):
        return None
    stub = StubObject(cls)
    stub.state = {"shape": SizeValue(logical.shape), "dtype": DtypeValue(logical.dtype), **members}
    stub.has_state = True
    return stub


def _ordered_dict(ref: GlobalRef, args: tuple[Any, ...]) -> collections.OrderedDict[Any, Any]:
    out: collections.OrderedDict[Any, Any] = collections.OrderedDict()
    if args and isinstance(args[0], (list, tuple)):
        for item in args[0]:
            key, value = item
            out[key] = value
    return out


def _torch_size(ref: GlobalRef, args: tuple[Any, ...]) -> SizeValue:
    return SizeValue(_int_tuple(args[0] if args else (), "torch.Size"))


def _torch_device(ref: GlobalRef, args: tuple[Any, ...]) -> DeviceValue:
    if len(args) == 2 and args[1] is not None:
        return DeviceValue(f"{args[0]}:{args[1]}")
    return DeviceValue(str(args[0]))


def _codecs_encode(ref: GlobalRef, args: tuple[Any, ...]) -> bytes:
    text, encoding = args[0], args[1] if len(args) > 1 else "utf-8"
    if encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise ValueError(f"unexpected encoding {encoding!r}")
    return str(text).encode(encoding)


def _builtin(kind: type[Any]) -> Emulator:
    def make(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
        if kind in (set, frozenset, bytearray, list, tuple, dict) and args and args[0] is not None:
            if kind is dict and isinstance(args[0], dict):
                return dict(args[0])
            if not isinstance(args[0], (list, tuple, set, frozenset, bytes, bytearray, dict)):
                raise ValueError(f"{kind.__name__} from a {type(args[0]).__name__}")
            return kind(args[0])
        if kind is complex:
            return complex(float(args[0]), float(args[1]) if len(args) > 1 else 0.0)
        if kind is slice:
            return slice(*args[:3])
        return kind()

    return make


def _get_layout(ref: GlobalRef, args: tuple[Any, ...]) -> LayoutValue:
    return LayoutValue(str(args[0]).removeprefix("torch."))


def _sparse(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    """A sparse tensor as one tensor row (layout, shape, nnz); its component tensors stay in ``extra``."""
    stub = StubObject(ref.dotted, args, state={"layout": args[0] if args else None,
                                               "components": args[1] if len(args) > 1 else None}, has_state=True)
    if len(args) < 2 or not isinstance(args[1], tuple):
        return stub
    layout, data = str(args[0]).removeprefix("torch."), args[1]
    if layout == "sparse_coo" and len(data) >= 3:
        parts, size = {"indices": data[0], "values": data[1]}, data[2]
    elif layout in ("sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc") and len(data) >= 4:
        parts, size = {"compressed_indices": data[0], "plain_indices": data[1], "values": data[2]}, data[3]
    else:
        return stub
    values = parts["values"]
    if not all(isinstance(t, TensorInfo) for t in parts.values()) or not isinstance(size, tuple) \
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in size):
        return stub
    nnz = values.shape[0] if values.shape else 0
    stride, acc = [], 1
    for dim in reversed(size):
        stride.append(acc)
        acc *= max(dim, 1)
    return TensorInfo(dtype=values.dtype, shape=tuple(size), stride=tuple(reversed(stride)), offset=0, storage=None,
                      layout=layout, extra={"nnz": nnz, "sparse_components": parts, "device": values.device})


def _numpy_scalar(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    """numpy.core.multiarray.scalar(dtype, bytes): decode plain numeric scalars without numpy's pickle."""
    import numpy as np

    dtype, raw = args[0], args[1] if len(args) > 1 else b""
    if (isinstance(dtype, NumpyDtype) and dtype.numpy is not None and isinstance(raw, (bytes, bytearray))
            and len(raw) == dtype.numpy.itemsize):
        return np.frombuffer(bytes(raw), dtype=dtype.numpy)[0]
    return StubObject(ref.dotted, args)


class NumpyDtype:
    """numpy.dtype(...) from a pickle: kept only for plain numeric/bool kinds."""

    def __init__(self, spec: str) -> None:
        import numpy as np

        self.spec = spec
        self.numpy = None
        if isinstance(spec, str) and len(spec) <= 4 and spec[:1] in "fiubc?" and spec[1:].isdigit() or spec == "b1":
            try:
                self.numpy = np.dtype(spec)
            except TypeError:
                self.numpy = None

    def __ckpt_setstate__(self, state: Any) -> None:
        if self.numpy is not None and isinstance(state, tuple) and len(state) > 1 and state[1] in "<>|=":
            self.numpy = self.numpy.newbyteorder(state[1]) if state[1] != "|" else self.numpy

    def __repr__(self) -> str:
        return f"dtype({self.spec!r})"


class NumpyArray:
    """numpy's `_reconstruct(ndarray, ...)` plus its BUILD state, decoded without numpy's unpickler.

    Plain numeric arrays become a read-only array value (shown as numpy shows it); object arrays keep
    their items, which the tree shows as children (they are inert stubs like everything else).
    """

    MAX_BYTES = 64 << 20

    def __init__(self) -> None:
        self.array: Any = None
        self.items: list[Any] | None = None

    def __ckpt_setstate__(self, state: Any) -> None:
        import numpy as np

        if not (isinstance(state, tuple) and len(state) == 5):
            return
        _version, shape, dtype, fortran, raw = state
        if isinstance(raw, list):  # an object array: its elements were pickled one by one
            self.items = raw
            return
        if not (isinstance(dtype, NumpyDtype) and dtype.numpy is not None and isinstance(raw, (bytes, bytearray))):
            return
        shape = _int_tuple(shape, "array shape")
        if len(raw) > self.MAX_BYTES or any(d < 0 for d in shape) or math.prod(shape) * dtype.numpy.itemsize != len(raw):
            return
        array = np.frombuffer(bytes(raw), dtype=dtype.numpy).reshape(shape, order="F" if fortran else "C")
        self.array = array

    def __repr__(self) -> str:
        if self.array is not None:
            return repr(self.array)
        return "<numpy.ndarray (not decoded)>"


def _numpy_reconstruct(ref: GlobalRef, args: tuple[Any, ...]) -> NumpyArray:
    return NumpyArray()


def _numpy_dtype(ref: GlobalRef, args: tuple[Any, ...]) -> NumpyDtype:
    return NumpyDtype(args[0] if args else "")


def _jit_identity(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    """torch.jit._pickle.build_*list(data) and restore_type_tag(value, type): the value itself."""
    return args[0]


def _jit_tensor_from_id(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    return args[0] if isinstance(args[0], int) else None


def _reconstructor(ref: GlobalRef, args: tuple[Any, ...]) -> Any:
    """copyreg._reconstructor(cls, base, state): protocol 0/1 object creation; cls is only recorded."""
    cls = args[0]
    return StubObject(cls.dotted if isinstance(cls, GlobalRef) else repr(cls), ())


EMULATORS: dict[str, Emulator] = {
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
    "torch._utils._rebuild_qtensor": _rebuild_qtensor,
    "torch._utils._rebuild_meta_tensor_no_storage": _rebuild_meta_or_wrapper,
    "torch._utils._rebuild_wrapper_subclass": _rebuild_meta_or_wrapper,
    "torch._utils._rebuild_sparse_tensor": _sparse,
    "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    "torch._utils._rebuild_device_tensor_from_numpy": _rebuild_device_tensor_from_numpy,
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": _rebuild_device_tensor_from_cpu_tensor,
    "torch.Size": _torch_size,
    "torch.device": _torch_device,
    "torch.serialization._get_layout": _get_layout,
    "collections.OrderedDict": _ordered_dict,
    "_codecs.encode": _codecs_encode,
    "builtins.set": _builtin(set),
    "builtins.frozenset": _builtin(frozenset),
    "builtins.bytearray": _builtin(bytearray),
    "builtins.list": _builtin(list),
    "builtins.tuple": _builtin(tuple),
    "builtins.dict": _builtin(dict),
    "builtins.complex": _builtin(complex),
    "builtins.slice": _builtin(slice),
    "copyreg._reconstructor": _reconstructor,
    **{name: _jit_identity for name in TORCHSCRIPT_GLOBALS if not name.endswith("_from_id")},
    "torch.jit._pickle.build_tensor_from_id": _jit_tensor_from_id,
    # Emulated for display, but not safe for torch.load(weights_only=True): reported as unsafe.
    "numpy.core.multiarray.scalar": _numpy_scalar,
    "numpy._core.multiarray.scalar": _numpy_scalar,
    "numpy.dtype": _numpy_dtype,
    "numpy.core.multiarray._reconstruct": _numpy_reconstruct,
    "numpy._core.multiarray._reconstruct": _numpy_reconstruct,
}

def installed_torch() -> tuple[int, ...] | None:
    """The installed torch's release as (major, minor), read from its package metadata (torch is not
    imported); None when no torch distribution is found."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    return release_of(version)


def release_of(version: str) -> tuple[int, ...] | None:
    """(major, minor) of a version string ("2.13.0+cpu" -> (2, 13)), None when it does not start with them."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def safe_for(release: tuple[int, ...] | None) -> frozenset[str]:
    """What torch `release` accepts of the names ckptview emulates: a name a later torch allows (`SINCE`) is
    safe only from that release on (no torch found: never)."""
    def allowed(name: str) -> bool:
        first = release_of(SINCE[name]) if name in SINCE else None
        return first is None or (release is not None and release >= first)

    return frozenset(n for n in TORCH_WEIGHTS_ONLY_GLOBALS | TORCH_REGISTERED_GLOBALS if allowed(n))


# Globals that are safe to reference: what the installed torch's weights-only unpickler accepts by default.
SAFE_GLOBALS: frozenset[str] = safe_for(installed_torch())


def is_safe_global(dotted: str, *, torchscript: bool = False) -> bool:
    """True for globals torch's weights-only loader accepts, and TorchScript's own class names (and, in
    a TorchScript archive, its `torch.jit._pickle` helpers)."""
    # `__torch__.*` names TorchScript's own compiled classes: inside a TorchScript archive only. Anywhere
    # else torch's weights-only loader refuses them, and so does this.
    return dotted in SAFE_GLOBALS or torchscript and (dotted.startswith("__torch__.") or dotted in TORCHSCRIPT_GLOBALS)


_CONSTANT_NAMES = {
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged",
    "per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
    "per_channel_affine_float_qparams", "contiguous_format", "channels_last", "channels_last_3d",
    "preserve_format",
}


def resolve_constant(ref: GlobalRef) -> Any:
    """Turn a referenced global into a value where torch means a constant: dtypes, storages, layouts."""
    if ref.module in ("torch", "torch.cuda") and ref.name in dtypes.STORAGE_CLASSES:
        return StorageClass(ref.dotted, dtypes.STORAGE_CLASSES[ref.name])
    if ref.dotted in ("torch.storage.UntypedStorage", "torch.storage.TypedStorage"):
        return StorageClass(ref.dotted, "uint8")
    if ref.module == "torch" and ref.name in _CONSTANT_NAMES:
        return LayoutValue(ref.name)
    if ref.module == "torch" and dtypes.is_known(ref.name):
        return DtypeValue(dtypes.canonical(ref.name))
    return ref
