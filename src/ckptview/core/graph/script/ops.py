"""Which calls of TorchScript code are tensor operations, and what torch's inlined graph calls them.

`torch.linear(x, w, b)` in the code is `aten::linear` in torch's graph and `aten.linear` here; `ops.prim.X`
is `prim::X`. A call is a node when it returns a tensor: when it takes one (and is not one of the calls
below that answer a size, a type or a flag) or makes one from nothing (a factory).
"""

from __future__ import annotations

# Calls that take tensors but answer something else (sizes, flags, types, text, list edits).
NOT_TENSORS = frozenset({
    "dim", "size", "len", "numel", "item", "is_floating_point", "is_complex", "is_signed", "element_size",
    "format", "__is__", "__isnot__", "__not__", "__contains__", "is_grad_enabled", "device", "dtype", "layout",
    "tolist", "get_device", "is_nonzero", "equal", "allclose", "is_same_size", "is_contiguous", "stride",
    "sym_size", "sym_numel", "sym_stride", "warn", "str", "is_cuda", "is_cpu", "is_mps", "is_xpu", "is_sparse",
    "is_quantized", "is_meta", "requires_grad", "Int", "Float", "Bool", "ScalarImplicit", "IntImplicit",
    "FloatImplicit", "__range_length", "__derive_index", "RaiseException", "_assert", "keys", "values",
    "items", "pop", "remove", "clear", "_set_item", "__setitem__", "is_scripting", "is_tracing",
    "isinstance", "unchecked_unwrap_optional", "shape", "uninitialized", "manual_seed", "qscheme",
    "q_scale", "q_zero_point", "_version", "is_leaf", "output_nr", "data_ptr", "is_inference", "is_neg",
    "is_conj", "ord", "chr", "hash", "id", "print", "is_autocast_enabled",
})
# Calls that hand back one of their arguments unchanged.
PASS_THROUGH = frozenset({"_unwrap_optional", "unchecked_cast", "annotate", "list", "copy"})
# List edits: `torch.append(outs, y)` adds `y` to the list `outs`.
LIST_EDITS = frozenset({"append", "extend", "insert"})
# Calls that make a tensor from sizes or numbers alone.
FACTORIES = frozenset({
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "range", "linspace",
    "logspace", "eye", "tensor", "scalar_tensor", "as_tensor", "empty_strided", "NumToTensor", "normal",
    "tril_indices", "triu_indices", "bartlett_window", "blackman_window", "hamming_window", "hann_window",
    "kaiser_window", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
})
# Python operators on tensors, as the aten operator each one is.
BINARY = {"Add": "add", "Sub": "sub", "Mult": "mul", "Div": "div", "FloorDiv": "floor_divide", "Mod": "remainder",
          "Pow": "pow", "MatMult": "matmul", "BitAnd": "__and__", "BitOr": "__or__", "BitXor": "__xor__",
          "LShift": "__lshift__", "RShift": "__rshift__"}
COMPARE = {"Eq": "eq", "NotEq": "ne", "Lt": "lt", "LtE": "le", "Gt": "gt", "GtE": "ge"}
UNARY = {"USub": "neg", "Invert": "bitwise_not"}


def op_name(dotted: str) -> str | None:
    """`aten.linear` for `torch.linear`, `prim.NumToTensor` for `ops.prim.NumToTensor`; None for other names."""
    parts = dotted.split(".")
    if len(parts) == 2 and parts[0] == "torch":
        return f"aten.{parts[1]}"
    if len(parts) == 3 and parts[0] == "ops":
        return f"{parts[1]}.{parts[2]}"
    return None
