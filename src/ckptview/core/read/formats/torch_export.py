"""`torch.export.save` archives (.pt2): an exported program's weights, constants and signature.

What torch 2.x writes (a zip under one root folder): `archive_format` ("pt2"), `models/<model>.json`
(the serialized program: graph, signature), `data/weights/<model>_weights_config.json` and
`data/constants/<model>_constants_config.json` (fqn -> file, tensor metadata, `use_pickle`), the files
`data/weights/weight_N` / `data/constants/tensor_N` (a storage's raw bytes; tensors sharing a storage
share the file) or, with `use_pickle`, a `torch.save` archive (tensor subclasses), and
`data/sample_inputs/<model>.pt` (torch.save'd example inputs). Only JSON and headers are read at open;
raw weights are lazily-read zip members, pickled ones go through the safe pickle VM.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget, json_units, source_units
from ckptview.core.checkpoint import MODULE_PART, Checkpoint, Node, OpenFiles, Storage, TensorInfo
from ckptview.core.errors import CheckpointError, CheckpointFormatError, NotACheckpointError
from ckptview.core.read.bytes.sources import ZipMember
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.formats.torch_zip import ZipArchive, load_embedded, opened_archive
from ckptview.core.read.pickle.census import census
from ckptview.core.read.pickle.to_tree import build_tree
from ckptview.core.read.pickle.torch_globals import check_view
from ckptview.core.read.pickle.torch_tree import unsafe_of

NAME = "torch-export"
PRIORITY = 120  # above torch-zip, which declines a .pt2 (no data.pkl)
MAX_JSON_BYTES = 512 << 20  # one record read whole: a bound on one allocation (its parse is charged)
ENTRY_COST = 8  # units an entry of a payload config or a signature costs (a tree node, a dict of text)
# `data/aotinductor/`: an AOTInductor package starts with its generated sources, the other records come later.
_HINTS = (b"archive_format", b"data/weights/", b"data/constants/", b"models/", b"serialized_exported_program",
          b"data/aotinductor/")

# torch._export.serde.schema.ScalarType
SCALAR_TYPES = {
    1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32", 8: "float64",
    9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16", 28: "uint16",
    29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz",
    33: "float8_e8m0fnu", 34: "uint32", 35: "uint64",
}
_SYMBOL = re.compile(r"Symbol\('([^']+)'")


def sniff(source: Source) -> bool:
    """True when the source's first bytes look like a torch.export .pt2 archive."""
    head = source.head
    return head.startswith(b"PK\x03\x04") and any(h in head for h in _HINTS)


class _Archive(ZipArchive):
    """A torch.export archive: the zip reader of torch.save files, rooted at `archive_format`.

    Its JSON records are charged to the archive's budget while they are read or inflated, by what parsing
    them builds (`json_units`), so a record that inflates a thousandfold stops where the file's bytes stop
    paying, before it is parsed."""

    MARKER = "archive_format"

    def text(self, name: str, units: Callable[[bytes | bytearray], int] = len, what: str = "bytes read") -> str | None:
        if self.member(name) is None:
            return None
        return self.read_small(name, MAX_JSON_BYTES, units=units, what=what).decode("utf-8", "replace")

    def json(self, name: str) -> Any:
        text = self.text(name, json_units, f"JSON of record '{name[:120]}'")
        if text is None:
            return None
        try:
            return json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise CheckpointFormatError(f"record '{name}' is not valid JSON ({str(exc)[:80]})") from None

    def pickled(self, name: str) -> tuple[Any, list[str]]:
        """A torch.save'd member read with the safe pickle VM (it must be stored uncompressed)."""
        member = self.member(name)
        if member is None:
            raise CheckpointFormatError(f"record '{name}' missing")
        where = member.file_range()
        if where is None:
            raise CheckpointFormatError(f"record '{name}' is compressed; a torch.save record must be stored")
        _, offset, length = where
        return load_embedded(self.fmap, offset, length, name, self.budget)


class SizeTexts:
    """Serialized SymInts as torch prints them, each expression parsed once (many values share one, many nodes
    name one value) and charged to `budget` by what parsing it costs."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.texts: dict[str, str] = {}

    def size(self, value: Any) -> int | str:
        """A serialized SymInt: its int, or the size's expression as torch prints it (`s0`, `2*s94`)."""
        if isinstance(value, dict):
            as_int = value.get("as_int")
            if isinstance(as_int, int):
                return as_int
            expr = value.get("as_expr")
            if isinstance(expr, dict):
                return self.text(str(expr.get("expr_str", "?")))
        if isinstance(value, int):
            return value
        return "?"

    def text(self, expr: str) -> str:
        """`sympy_text(expr)`, once per expression."""
        known = self.texts.get(expr)
        if known is None:
            self.budget.charge(source_units(expr[:_MAX_EXPR].encode("utf-8", "replace")), "size expressions parsed")
            known = self.texts[expr] = sympy_text(expr)
        return known


def _as_int(value: Any) -> int | None:
    """A serialized SymInt's int, None when it is an expression (or not a SymInt)."""
    if isinstance(value, dict):
        value = value.get("as_int")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_MAX_EXPR = 2_000  # characters of an expression parsed; a longer one is shown as its symbols
_OPERATORS = {"Mul": "*", "Add": " + ", "Pow": "**", "FloorDiv": "//", "Mod": " % "}


def sympy_text(expr: str) -> str:
    """A size expression written by sympy's srepr (``Mul(Integer(2), Symbol('s94', positive=True))``) as torch
    prints it (``2*s94``). Parsed as syntax only (`ast.parse`: nothing is evaluated); unknown forms keep
    their call syntax, and text that does not parse shows its symbols."""
    import ast

    try:
        if len(expr) > _MAX_EXPR:
            raise ValueError(expr)
        tree = ast.parse(expr, mode="eval").body
        return _expr_text(tree, 0)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        symbols = _SYMBOL.findall(expr[:_MAX_EXPR])
        return ", ".join(dict.fromkeys(symbols)) if symbols else expr[:200]


def _expr_text(node: Any, depth: int) -> str:  # bounded: 50 levels, then its symbols are shown
    import ast

    if depth > 50:
        raise ValueError("nested too deep")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)) and not isinstance(node.value, bool):
        return str(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return "-" + _expr_text(node.operand, depth + 1)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise ValueError("not an expression of sympy's")
    name, args = node.func.id, [_expr_text(a, depth + 1) for a in node.args]
    if name in ("Integer", "Symbol") and len(args) == 1:
        return args[0]
    if name == "Rational" and len(args) == 2:
        return f"{args[0]}/{args[1]}"
    if name in _OPERATORS and len(args) >= 2:
        parts = [f"({a})" if (" " in a and name != "Add") else a for a in args]
        text = _OPERATORS[name].join(parts)
        return text.replace("+ -", "- ") if name == "Add" else text
    return f"{name}({', '.join(args)})"


def _concrete(values: Any, what: str, sizes: SizeTexts) -> tuple[int, ...]:
    values = values if isinstance(values, list) else []
    ints = tuple(i for i in map(_as_int, values) if i is not None)
    if len(ints) != len(values):
        shown = [sizes.size(v) for v in values[:8]] + (["..."] if len(values) > 8 else [])
        raise CheckpointFormatError(f"{what} is not concrete: {shown}")
    return ints


def _dtype(code: Any) -> str:
    name = SCALAR_TYPES.get(code) if isinstance(code, int) else None
    if name is None:
        raise CheckpointFormatError(f"unknown scalar type {code!r}")
    return name


def _device(meta: dict[str, Any]) -> str:
    dev = meta.get("device") or {}
    kind = str(dev.get("type", "cpu"))
    return kind if dev.get("index") is None else f"{kind}:{dev['index']}"


def _payload_tensor(archive: _Archive, folder: str, fqn: str, entry: dict[str, Any],
                    storages: dict[str, Storage], sizes: SizeTexts) -> TensorInfo:
    meta = entry.get("tensor_meta")
    if not isinstance(meta, dict):
        raise CheckpointFormatError(f"'{fqn}' has no tensor metadata")
    dtype = _dtype(meta.get("dtype"))
    path_name = str(entry.get("path_name", ""))
    record = folder + path_name
    storage = storages.get(record)
    if storage is None:
        member = archive.member(record)
        itemsize = dtypes.itemsize(dtype)
        numel = (member.file_size // itemsize) if member is not None else 0
        storage = Storage(key=record, dtype=dtype, numel=numel, device=_device(meta), source=member)
        if member is None:
            storage.broken = f"record '{record}' missing"
        else:
            member.max_bytes = 0  # raised below to what the views need: a zip bomb inflates no further
        storages[record] = storage
    offset = _as_int(meta.get("storage_offset", {"as_int": 0}))
    if offset is None:
        raise CheckpointFormatError(f"storage offset of '{fqn}' is not concrete")
    info = TensorInfo(dtype=dtype, shape=_concrete(meta.get("sizes"), f"shape of '{fqn}'", sizes),
                      stride=_concrete(meta.get("strides"), f"strides of '{fqn}'", sizes),
                      offset=offset, storage=storage,
                      requires_grad=meta.get("requires_grad") is True, is_parameter=entry.get("is_param") is True)
    if isinstance(entry.get("is_param"), bool):  # the program's signature says parameter or buffer
        info.set_extra(MODULE_PART, "parameter" if entry["is_param"] else "buffer")
    source = storage.source
    if isinstance(source, ZipMember) and info.numel and len(info.shape) == len(info.stride):
        last = info.offset + sum((n - 1) * st for n, st in zip(info.shape, info.stride, strict=True))
        source.max_bytes = max(source.max_bytes or 0, (last + 1) * dtypes.itemsize(dtype))
    if storage.broken:
        info.broken = storage.broken
    elif info.numel and storage.dtype != dtype:
        info.broken = f"record '{record}' is shared by tensors of different dtypes"
    else:
        check_view(info)
    return info


def _payloads(archive: _Archive, folder: str, config_name: str, parent: Node, globals_seen: dict[str, None],
              warnings: list[str], storages: dict[str, Storage], sizes: SizeTexts) -> None:
    config = archive.json(config_name)
    if config is None:
        return
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise CheckpointFormatError(f"record '{config_name}' has no config mapping")
    for fqn, entry in entries.items():  # charged: each entry
        sizes.budget.charge(ENTRY_COST, "payload entries listed")
        if not isinstance(entry, dict):
            raise CheckpointFormatError(f"'{config_name}': entry '{fqn}' is not an object")
        path_name = str(entry.get("path_name", ""))
        if not entry.get("use_pickle"):
            info = _payload_tensor(archive, folder, fqn, entry, storages, sizes)
            parent.add(Node(key=fqn, kind="tensor", type_name="Parameter" if info.is_parameter else "Tensor",
                            tensor=info))
            if info.broken:
                warnings.append(f"tensor '{fqn}' is broken: {info.broken}")
            continue
        if path_name.startswith(("custom_obj_", "opaque_obj_")):
            member = archive.member(folder + path_name)
            size = member.file_size if member is not None else 0
            value: Any = _Opaque(f"<{'TorchBind' if path_name.startswith('custom') else 'opaque'} object, "
                                 f"{size} bytes in {path_name} (not read: it would run code)>")
        else:
            try:
                value, found = archive.pickled(folder + path_name)
                globals_seen.update(dict.fromkeys(found))
            except CheckpointError as exc:
                value = _Opaque(f"<unreadable {path_name}: {exc}>")
                warnings.append(f"'{fqn}' is unreadable: {exc}")
        node = build_tree(value, sizes.budget)
        node.key = fqn
        parent.add(node)


def read_program(checkpoint: Checkpoint, model: str, budget: Budget) -> dict[str, Any]:
    """The serialized program `models/<model>.json` of an opened .pt2, read again as data (the graph's reader),
    charged to `budget` as it is read and by what parsing it builds.

    Read through the file map the open made, so a file that changed since it was opened is refused
    (FileChangedError), never read in its place; nothing is unpickled."""
    archive = opened_archive(checkpoint, _Archive, budget)
    assert isinstance(archive, _Archive)
    program = archive.json(f"models/{model}.json")
    if not isinstance(program, dict):
        raise CheckpointFormatError(f"record 'models/{model}.json' is not a serialized program")
    return program


class _Opaque:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _arg_text(arg: Any, tensors: dict[str, Any], sizes: SizeTexts, shapes: dict[str, list[int | str]]
              ) -> dict[str, Any]:
    """One serialized argument: {"name", "dtype", "shape"} for a tensor, else its kind and value."""
    if isinstance(arg, dict) and isinstance(arg.get("as_tensor"), dict):
        name = arg["as_tensor"].get("name")
        meta = tensors.get(name) if isinstance(name, str) else None
        meta = meta if isinstance(meta, dict) else {}
        out: dict[str, Any] = {"name": name}
        try:
            out["dtype"] = _dtype(meta.get("dtype"))
        except CheckpointFormatError:
            out["dtype"] = None
        shape = shapes.get(name) if isinstance(name, str) else None
        if shape is None:
            dims = meta.get("sizes")
            dims = dims if isinstance(dims, list) else []
            sizes.budget.charge(len(dims) + 1, "sizes read")
            shape = [sizes.size(s) for s in dims]
            if isinstance(name, str):
                shapes[name] = shape  # read once per value: many inputs may name one
        out["shape"] = list(shape)
        sizes.budget.charge(len(shape) + 1, "sizes listed")
        return out
    if isinstance(arg, dict) and len(arg) == 1:
        kind, value = next(iter(arg.items()))
        if isinstance(value, dict) and "name" in value:
            return {"name": value["name"], "kind": kind}
        return {"kind": kind, "value": value}
    return {"value": arg}


def signature(program: dict[str, Any], sizes: SizeTexts) -> dict[str, Any]:
    """The program's inputs and outputs, each with its kind (user_input, parameter, buffer, ...)."""
    module = program.get("graph_module") or {}
    tensors = (module.get("graph") or {}).get("tensor_values") or {}
    sig = module.get("signature") or {}
    result: dict[str, Any] = {"inputs": [], "outputs": []}
    shapes: dict[str, list[int | str]] = {}
    for side, specs in (("inputs", sig.get("input_specs")), ("outputs", sig.get("output_specs"))):
        for spec in specs or []:  # charged: each spec
            sizes.budget.charge(ENTRY_COST, "signature entries listed")
            if not isinstance(spec, dict) or len(spec) != 1:
                continue
            kind, body = next(iter(spec.items()))
            body = body if isinstance(body, dict) else {}
            item = {"kind": kind}
            if "arg" in body:
                arg = body["arg"]
                if isinstance(arg, dict) and "name" in arg:  # a bare TensorArgument (parameters, buffers)
                    arg = {"as_tensor": arg}
                item.update(_arg_text(arg, tensors, sizes, shapes))
            elif "name" in body:  # constant_input
                value = body.get("value")
                if isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith("as_"):
                    value = next(iter(value.values()))  # {"as_int": 3} -> 3
                item.update({"name": body["name"], "value": value})
            for key in ("parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name",
                        "persistent", "target"):
                if key in body:
                    item[key] = body[key]
            result[side].append(item)
    return result


def _describe(item: dict[str, Any]) -> str:
    name = item.get("name") or item.get("kind")
    if "dtype" in item:
        return f"{name}: {item['dtype']}[{', '.join(str(s) for s in item.get('shape', []))}]"
    if "value" in item:
        return f"{name} = {item['value']!r}"
    target = item.get("parameter_name") or item.get("buffer_name") or item.get("tensor_constant_name")
    return f"{name} -> {target}" if target else str(name)


def _signature_node(sig: dict[str, Any]) -> Node:
    node = Node(key="signature", kind="dict", type_name="signature")
    for side in ("inputs", "outputs"):  # bounded: two sides; their entries were charged by `signature`
        user = [i for i in sig[side] if i["kind"] in ("user_input", "user_output", "constant_input")]
        lst = node.add(Node(key=side, kind="list", type_name="list"))
        for i, item in enumerate(user):
            lst.add(Node(key=i, kind="value", type_name="str", value=_describe(item)))
    return node


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a torch.export .pt2 archive into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    path = source.path
    budget = ctx.budget_for(source)
    archive = _Archive(path, fmap=source.file_map(), budget=budget)
    sizes = SizeTexts(budget)
    fmt_value = (archive.text("archive_format") or "").strip()
    if fmt_value != "pt2":
        raise NotACheckpointError(f"not a checkpoint: archive_format is {fmt_value[:20]!r}, not 'pt2'")
    models = sorted(n[len(archive.prefix) + len("models/"):-len(".json")] for n in archive.infos
                    if n.startswith(archive.prefix + "models/") and n.endswith(".json"))
    if not models:
        native = census(archive.fmap, budget=budget).native
        raise CheckpointFormatError("pt2 archive holds no models/*.json program (an AOTInductor-only package?)"
                                    + (f"; its native code: {', '.join(native[:3])}" if native else ""))
    root = Node(key="", kind="dict", type_name="ExportedProgram")
    globals_seen: dict[str, None] = {}  # every global named, in order (a set: payloads may name many)
    warnings: list[str] = []
    signatures: dict[str, Any] = {}
    storages: dict[str, Storage] = {}
    info_meta: dict[str, Any] = {}
    for model in models:
        # One program: its weights at the top (names as in its state_dict); several: one branch each.
        parent = root if len(models) == 1 else root.add(Node(key=model, kind="dict", type_name="ExportedProgram"))
        program = archive.json(f"models/{model}.json") or {}
        _payloads(archive, "data/weights/", f"data/weights/{model}_weights_config.json", parent,
                  globals_seen, warnings, storages, sizes)
        consts = Node(key="constants", kind="dict", type_name="dict")
        _payloads(archive, "data/constants/", f"data/constants/{model}_constants_config.json", consts,
                  globals_seen, warnings, storages, sizes)
        if consts.children:
            parent.add(consts)
        sig = signature(program, sizes)
        signatures[model] = sig
        parent.add(_signature_node(sig))
        if f"{archive.prefix}data/sample_inputs/{model}.pt" in archive.infos:
            try:
                sample, found = archive.pickled(f"data/sample_inputs/{model}.pt")
                globals_seen.update(dict.fromkeys(found))
                node = build_tree(sample, budget)
                node.key = "sample_inputs"
                parent.add(node)
            except CheckpointError as exc:
                warnings.append(f"sample inputs of '{model}' are unreadable: {exc}")
        info_meta[model] = {k: program.get(k) for k in ("torch_version", "schema_version") if k in program}  # bounded
    # Every record torch.export.load would unpickle (pickled weights and constants whatever their encoding,
    # opaque objects, sample inputs, legacy payload files), read by the same census the run gate uses.
    pickles = census(archive.fmap, budget=budget)
    globals_seen.update(dict.fromkeys(pickles.globals))
    for record in pickles.unreadable:
        warnings.append(f"pickle {record} is unreadable: torch.export.load would unpickle it unchecked")
    warnings += [f"not checked: {a}" for a in pickles.ambiguous]
    # Compiled libraries (AOTInductor): torch.export.load loads them, and loading a library runs its code.
    warnings[:0] = [f"native code: {n} (a compiled library; loading the .pt2 runs it)" for n in pickles.native]
    unsafe = unsafe_of(list(globals_seen))
    if unsafe:
        warnings.insert(0, "file references globals outside the safe set (nothing was run): " + ", ".join(unsafe))
    return Checkpoint(path=path, format=NAME, file_size=source.size, root=root, globals=list(globals_seen),
                      unsafe_globals=unsafe, warnings=warnings, files=OpenFiles([archive.fmap]),
                      metadata={"models": models, "program_info": info_meta, "native_code": pickles.native,
                                "signature": signatures[models[0]] if len(models) == 1 else signatures})
