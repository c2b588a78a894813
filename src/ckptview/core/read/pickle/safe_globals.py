"""The globals torch's weights-only unpickler accepts by default (torch 2.13.0 and 2.14.1).

A file that references only these is one `torch.load(weights_only=True)` would open; every other
global it names is reported as an *unsafe global*. The names are data (nothing is imported); they
were read from `torch._weights_only_unpickler._get_allowed_globals()` and the classes torch's own modules
register (`torch.serialization.get_safe_globals()`). `tests/core/read/pickle/test_torch_allowlist.py` holds
them against the installed torch's lists: what torch allows and this file does not is in `NOT_TRUSTED` with
the reason, and the safe set (`torch_globals.SAFE_GLOBALS`) allows nothing the installed torch refuses: a
name only a later torch allows (`SINCE`) is safe beside that torch only.
"""

from __future__ import annotations

import builtins

TORCH_WEIGHTS_ONLY_GLOBALS = frozenset({
    "_codecs.encode",
    "builtins.bytearray",
    "builtins.complex",
    "builtins.set",
    "collections.Counter",
    "collections.OrderedDict",
    "torch.BFloat16Storage",
    "torch.BFloat16Tensor",
    "torch.BoolStorage",
    "torch.BoolTensor",
    "torch.ByteStorage",
    "torch.ByteTensor",
    "torch.CharStorage",
    "torch.CharTensor",
    "torch.ComplexDoubleStorage",
    "torch.ComplexFloatStorage",
    "torch.DoubleStorage",
    "torch.DoubleTensor",
    "torch.FloatStorage",
    "torch.FloatTensor",
    "torch.HalfStorage",
    "torch.HalfTensor",
    "torch.IntStorage",
    "torch.IntTensor",
    "torch.LongStorage",
    "torch.LongTensor",
    "torch.QInt32Storage",
    "torch.QInt8Storage",
    "torch.QUInt2x4Storage",
    "torch.QUInt4x2Storage",
    "torch.QUInt8Storage",
    "torch.ShortStorage",
    "torch.ShortTensor",
    "torch.Size",
    "torch.Tensor",
    "torch._tensor._rebuild_from_type_v2",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor",
    "torch._utils._rebuild_device_tensor_from_numpy",
    "torch._utils._rebuild_meta_tensor_no_storage",
    "torch._utils._rebuild_nested_tensor",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch._utils._rebuild_qtensor",
    "torch._utils._rebuild_sparse_tensor",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_wrapper_subclass",
    "torch.bcomplex32",
    "torch.bfloat16",
    "torch.bits16",
    "torch.bits1x8",
    "torch.bits2x4",
    "torch.bits4x2",
    "torch.bits8",
    "torch.bool",
    "torch.complex128",
    "torch.complex32",
    "torch.complex64",
    "torch.cuda.BFloat16Storage",
    "torch.cuda.BFloat16Tensor",
    "torch.cuda.BoolStorage",
    "torch.cuda.BoolTensor",
    "torch.cuda.ByteStorage",
    "torch.cuda.ByteTensor",
    "torch.cuda.CharStorage",
    "torch.cuda.CharTensor",
    "torch.cuda.ComplexDoubleStorage",
    "torch.cuda.ComplexFloatStorage",
    "torch.cuda.DoubleStorage",
    "torch.cuda.DoubleTensor",
    "torch.cuda.FloatStorage",
    "torch.cuda.FloatTensor",
    "torch.cuda.HalfStorage",
    "torch.cuda.HalfTensor",
    "torch.cuda.IntStorage",
    "torch.cuda.IntTensor",
    "torch.cuda.LongStorage",
    "torch.cuda.LongTensor",
    "torch.cuda.ShortStorage",
    "torch.cuda.ShortTensor",
    "torch.cuda.sparse.BFloat16Tensor",
    "torch.cuda.sparse.ByteTensor",
    "torch.cuda.sparse.CharTensor",
    "torch.cuda.sparse.DoubleTensor",
    "torch.cuda.sparse.FloatTensor",
    "torch.cuda.sparse.HalfTensor",
    "torch.cuda.sparse.IntTensor",
    "torch.cuda.sparse.LongTensor",
    "torch.cuda.sparse.ShortTensor",
    "torch.device",
    "torch.float16",
    "torch.float32",
    "torch.float4_e2m1fn_x2",
    "torch.float64",
    "torch.float8_e4m3fn",
    "torch.float8_e4m3fnuz",
    "torch.float8_e5m2",
    "torch.float8_e5m2fnuz",
    "torch.float8_e8m0fnu",
    "torch.int1",
    "torch.int16",
    "torch.int2",
    "torch.int3",
    "torch.int32",
    "torch.int4",
    "torch.int5",
    "torch.int6",
    "torch.int64",
    "torch.int7",
    "torch.int8",
    "torch.nn.parameter.Parameter",
    "torch.per_channel_affine",
    "torch.per_channel_affine_float_qparams",
    "torch.per_channel_symmetric",
    "torch.per_tensor_affine",
    "torch.per_tensor_symmetric",
    "torch.qint32",
    "torch.qint8",
    "torch.quint2x4",
    "torch.quint4x2",
    "torch.quint8",
    "torch.serialization._get_layout",
    "torch.sparse.BFloat16Tensor",
    "torch.sparse.ByteTensor",
    "torch.sparse.CharTensor",
    "torch.sparse.DoubleTensor",
    "torch.sparse.FloatTensor",
    "torch.sparse.HalfTensor",
    "torch.sparse.IntTensor",
    "torch.sparse.LongTensor",
    "torch.sparse.ShortTensor",
    "torch.storage.TypedStorage",
    "torch.storage.UntypedStorage",
    "torch.uint1",
    "torch.uint16",
    "torch.uint2",
    "torch.uint3",
    "torch.uint32",
    "torch.uint4",
    "torch.uint5",
    "torch.uint6",
    "torch.uint64",
    "torch.uint7",
    "torch.uint8",
})

# Classes torch's own modules register with `torch.serialization.add_safe_globals` when imported (torch
# 2.13.0: torch/distributed/tensor/__init__.py, torch/distributed/device_mesh.py): the DTensors of FSDP2 and
# tensor parallelism. `torch.load(weights_only=True)` accepts a file naming them in any program that uses
# DTensors (it asks for the import otherwise), so they are no unsafe globals.
TORCH_REGISTERED_GLOBALS = frozenset({
    "torch.distributed.device_mesh.DeviceMesh",
    "torch.distributed._mesh_layout._FlatLayout",
    "torch.distributed._mesh_layout._MeshLayout",
    "torch.distributed.tensor.DTensor",
    "torch.distributed.tensor._dtensor_spec.DTensorSpec",
    "torch.distributed.tensor._dtensor_spec.ShardOrderEntry",
    "torch.distributed.tensor._dtensor_spec.TensorMeta",
    "torch.distributed.tensor.placement_types.Partial",
    "torch.distributed.tensor.placement_types.Replicate",
    "torch.distributed.tensor.placement_types.Shard",
    "torch.distributed.tensor.placement_types._StridedShard",
})

# TorchScript archives (torch.jit.save) name these helpers of `torch/jit/_pickle.py` (torch 2.13.0: the
# whole module) to tag list types. Each returns its argument; torch.jit.load's C++ unpickler handles
# them itself. Safe in a TorchScript archive only: torch.load(weights_only=True) refuses them elsewhere.
TORCHSCRIPT_GLOBALS = frozenset({
    "torch.jit._pickle.build_boollist",
    "torch.jit._pickle.build_doublelist",
    "torch.jit._pickle.build_intlist",
    "torch.jit._pickle.build_tensor_from_id",
    "torch.jit._pickle.build_tensorlist",
    "torch.jit._pickle.restore_type_tag",
})

# Names torch allows from a release on (an older torch refuses a file naming them): name -> that release. The
# safe set holds them only when the installed torch is that release or later (`torch_globals.safe_for`).
SINCE: dict[str, str] = {
    "torch.bcomplex32": "2.14",  # the complex dtype of bfloat16 pairs
}

_COLLECTIVES = ("torch.distributed.distributed_c10d registers it (torch 2.14) for the exceptions that "
                "object collectives send between ranks; no checkpoint format of torch writes one, so a file "
                "naming it is flagged")
# What torch allows (by default, or as its own modules register on import) that ckptview does not treat as
# safe, and why. A file naming one of these is listed with it as an unsafe global (nothing runs either way).
NOT_TRUSTED: dict[str, str] = {
    "torch.nested._internal.nested_tensor.NestedTensor": (
        "a jagged nested tensor (torch.nested, registered when torch is imported): its values and offsets "
        "are listed as tensors, the jagged layout itself is not emulated, so the call is shown, not hidden"),
    "torch.nested._internal.nested_tensor._rebuild_njt": (
        "rebuilds a jagged nested tensor from its parts: not emulated (its values and offsets are listed)"),
    "torch._dynamo.decorators._DimRange": (
        "torch.compile's dynamic-dimension marks (registered by torch._dynamo), saved with a jagged nested "
        "tensor's metadata; nothing of a model's weights"),
    "torch.distributed._serialization._Entry": (
        "an entry of torch.distributed's streaming save format (registered by torch.distributed._serialization),"
        " which is no checkpoint format this tool reads"),
    "traceback.StackSummary": _COLLECTIVES,
    "traceback.FrameSummary": _COLLECTIVES,
    **{f"builtins.{name}": _COLLECTIVES for name, value in vars(builtins).items()
       if isinstance(value, type) and issubclass(value, BaseException)},
}
