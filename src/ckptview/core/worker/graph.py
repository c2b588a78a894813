"""The `graph` request of the worker: a library's architecture built on `meta` and traced, nothing read from a file.

The request carries the architecture (library, class, the config and preprocessor config read as data); the
inputs are those the built model declares, as for a forward pass (`declared_inputs`), made on `meta`. It names
no file, so the worker cannot read one: no weights, no pickle, no load
gate to pass. The class is built on the `meta` device (shapes only, no memory for weights), tied as its
library ties it, and traced by `torch.export` with meta inputs of those shapes; where export cannot trace
it, `torch.fx` does (module calls and functions instead of ATen overloads). The build is the run's own
(`library.build`: the config checked by `core/run/config_guard`, what the build opens guarded), and the
trace runs under the same guard (`build_guard`): a forward pass that would open a file, fetch a kernel or
start a process is refused in one line. The answer is the graph in the
JSON form of `ckptview graph --json`, its nodes' `params` named as the model's `state_dict()` names them,
with the groups of names that are one tensor (tied weights) beside it.
"""

from __future__ import annotations

import operator
from typing import Any

from ckptview.core.message import message_of
from ckptview.core.run.declared_sizes import Listing
from ckptview.core.run.input_specs import InputSpec
from ckptview.core.run.protocol import Job, WorkerError, one_line
from ckptview.core.worker.build_guard import guarded_build
from ckptview.core.worker.declared_inputs import NoDeclaredInputs, declared_inputs
from ckptview.core.worker.forward import keyword_names
from ckptview.core.worker.library import build, tie
from ckptview.core.worker.model_code import allow_caller_imports, build_user_model


def graph_job(job: Job) -> dict[str, Any]:
    """Build the request's architecture on meta, trace it; {"graph", "model_keys", "aliases", "tracer"}."""
    import torch

    req = job.request
    if req.get("model"):
        return code_graph_job(job)
    arch = req.get("architecture")
    if not isinstance(arch, dict):
        raise WorkerError("the graph request names no architecture", kind="protocol")
    job.enter("building the model")
    model = build(arch, "meta", req.get("dtype"), Listing.from_json(req.get("expect")))  # held against the file
    tie(model)
    specs = [InputSpec.from_json(s) for s in req.get("inputs") or []] or _declared(model, arch, req)
    if not specs:
        raise WorkerError(f"no inputs for {arch.get('library')} {arch.get('class')}: its config names none",
                          kind="input")
    inputs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device="meta") for s in specs]
    by_name = keyword_names(model, [s.name for s in specs]) if arch.get("library") in ("transformers",
                                                                                      "diffusers") else None
    job.enter("tracing")
    what = f"{arch.get('library')} {arch.get('class')}"
    with guarded_build() as guard:  # the forward pass traced opens, fetches and starts nothing either
        nodes, tracer, classes = _trace(model, inputs, by_name, what, guard)
    guard.check(what)
    return {"graph": {"source": f"{arch.get('library')}:{arch.get('class')}", "nodes": nodes, "classes": classes},
            "model_keys": list(model.state_dict()), "aliases": alias_groups(model), "tracer": tracer,
            "torch_version": torch.__version__, "key_map": converted_keys(model, _names(req.get("keys")))}


class _Unguarded:
    """The user's own code is guarded as a run guards it: not at all (it is theirs, named by them)."""

    def message(self, what: str) -> None:
        return None


def code_graph_job(job: Job) -> dict[str, Any]:
    """The user's model code (`graph --model`): imported as `run --model` imports it, built on meta where it
    allows (else on the CPU), traced with inputs of the request's shapes on the same device."""
    import torch

    req = job.request
    spec = str(req["model"])
    allow_caller_imports(req)
    job.enter("model code")
    device = "meta"
    try:
        with torch.device("meta"):
            model = build_user_model(spec, req.get("model_kwargs") or {}, req.get("cwd"))
    except WorkerError:
        raise
    except Exception:  # noqa: BLE001 - code that cannot be built on meta is built as a run builds it
        device = "cpu"
        model = build_user_model(spec, req.get("model_kwargs") or {}, req.get("cwd"))
    specs = [InputSpec.from_json(s) for s in req.get("inputs") or []]
    if not specs:
        raise WorkerError(f"no inputs for {spec}: the checkpoint's first layer says nothing of them; give their "
                          "shapes", kind="input")
    inputs = [torch.empty(s.shape, dtype=getattr(torch, s.dtype), device=device) for s in specs]
    job.enter("tracing")
    nodes, tracer, classes = _trace(model, inputs, None, spec, _Unguarded())
    return {"graph": {"source": f"model-code:{spec}", "nodes": nodes, "classes": classes},
            "model_keys": list(model.state_dict()), "aliases": alias_groups(model), "tracer": tracer,
            "torch_version": torch.__version__}


def keys_job(job: Job) -> dict[str, Any]:
    """The `keys` request: the architecture built on meta (not traced), and which of the request's checkpoint
    key names its library's loading renames or merges into which of the model's keys."""
    req = job.request
    arch = req.get("architecture")
    if not isinstance(arch, dict):
        raise WorkerError("the keys request names no architecture", kind="protocol")
    job.enter("building the model")
    model = build(arch, "meta", req.get("dtype"))
    return {"key_map": converted_keys(model, _names(req.get("keys")))}


def _names(value: Any) -> list[str]:
    return [k for k in value if isinstance(k, str)] if isinstance(value, list) else []


def converted_keys(model: Any, keys: list[str]) -> dict[str, str]:
    """{checkpoint key: the model's key} for the keys transformers' loading renames or merges (the Hub layouts
    transformers 5 converts as it loads: GPT-NeoX, Mixtral's experts, ViT, Swin), by its own rules and in its
    own order (`convert_and_load_state_dict_in_model`): what `run` gets from `from_pretrained`."""
    if not keys or not hasattr(model, "base_model_prefix"):
        return {}
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:  # a transformers before 5 renames nothing
        return {}
    mapping = get_model_conversion_mapping(model)
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in mapping if isinstance(m, WeightConverter)]
    meta = model.state_dict()
    prefix = model.base_model_prefix
    out: dict[str, str] = {}
    for key in keys:
        renamed, _ = rename_source_key(key, renamings, converters, prefix, meta)
        if renamed not in meta and key in meta:
            renamed, _ = rename_source_key(key, [], [], base_model_prefix=prefix, meta_state_dict=meta)
        if renamed != key and renamed in meta:
            out[key] = renamed
    return out


def _trace(model: Any, inputs: list[Any], by_name: list[str] | None, what: str,
           guard: Any) -> tuple[list[dict[str, Any]], str, dict[str, str]]:
    """(nodes, tracer, classes): torch.export with every input, then the first alone, then torch.fx."""
    import torch

    errors: list[str] = []
    for attempt in _attempts(inputs, by_name):
        try:
            with torch.no_grad():
                program = torch.export.export(model, *attempt, strict=False)
            return exported_nodes(program), "torch.export", module_classes(model, program)
        except Exception as exc:  # noqa: BLE001 - a model export cannot trace: try with less, then fx
            if (refused := guard.message(what)) is not None:
                raise WorkerError(refused, kind="refused") from None
            errors.append(f"torch.export: {type(exc).__name__}: {one_line(exc)}")
    try:
        return fx_nodes(model, by_name, inputs), "torch.fx", module_classes(model, None)
    except Exception as exc:  # noqa: BLE001 - neither traces it: one line saying why
        if (refused := guard.message(what)) is not None:
            raise WorkerError(refused, kind="refused") from None
        raise WorkerError(f"cannot trace {what}: {errors[0]}; torch.fx: {type(exc).__name__}: {one_line(exc)}",
                          kind="exception") from None


def _declared(model: Any, arch: dict[str, Any], req: dict[str, Any]) -> list[InputSpec]:
    """The inputs the built model declares, by the rule a run follows (`declared_inputs`): a forward pass's."""
    try:
        return [spec for spec, _ in declared_inputs(model, arch, req.get("preprocessor"))]
    except NoDeclaredInputs as exc:
        raise WorkerError(message_of(exc), kind="input") from None


def _attempts(inputs: list[Any], by_name: list[str] | None) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(args, kwargs) to export with: every input; then the first alone (a mask some models read by value)."""
    full = ((), dict(zip(by_name, inputs, strict=True))) if by_name else (tuple(inputs), {})
    if len(inputs) < 2:
        return [full]
    first = ((), {by_name[0]: inputs[0]}) if by_name else ((inputs[0],), {})
    return [full, first]


def module_classes(model: Any, program: Any) -> dict[str, str]:
    """{module path: its class's name}: the model's own modules, and the paths the program's nodes name
    (`nn_module_stack`, whose spelling the parent cleans as it cleans the nodes' modules)."""
    classes = {name: type(module).__name__ for name, module in model.named_modules() if name}
    for node in program.graph.nodes if program is not None else ():
        for entry in (node.meta.get("nn_module_stack") or {}).values():
            path, kind = entry[0], entry[1]
            if isinstance(path, str) and path and path not in classes:
                name = kind if isinstance(kind, str) else getattr(kind, "__qualname__", "")
                classes[path] = str(name).rpartition(".")[2]
    return classes


def alias_groups(model: Any) -> list[list[str]]:
    """Groups of state-dict names that are one tensor (tied weights), by identity: it holds on meta too."""
    holders: dict[int, list[str]] = {}
    for key, value in model.state_dict(keep_vars=True).items():
        holders.setdefault(id(value), []).append(key)
    return [names for names in holders.values() if len(names) > 1]


def _tensor_meta(value: Any) -> tuple[list[int | str] | None, str | None]:
    import torch

    if isinstance(value, torch.Tensor):
        shape: list[int | str] = [int(s) if isinstance(s, int) else str(s) for s in value.shape]
        return shape, str(value.dtype).removeprefix("torch.")
    return None, None


def _module(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else ""


def _op(target: Any) -> str:
    import torch

    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", None) or str(target)
    module = getattr(target, "__module__", None)
    return f"{module}.{name}" if module and module not in ("builtins", "_operator", "operator") else name


def exported_nodes(program: Any) -> list[dict[str, Any]]:
    """An exported program's graph as contract nodes: user inputs, every call_function, the output;
    parameter, buffer and constant placeholders become the `params` (state-dict names) of their users."""
    sig = program.graph_signature
    state = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    user = set(sig.user_inputs)
    out: list[dict[str, Any]] = []
    for node in program.graph.nodes:
        if node.op == "placeholder":
            if node.name in user:
                shape, dtype = _tensor_meta(node.meta.get("val"))
                out.append(_node(node.name, "input", "", [], [], shape, dtype))
            continue
        inputs = [n.name for n in node.all_input_nodes if n.name not in state and n.op != "get_attr"]
        params = [state[n.name] for n in node.all_input_nodes if n.name in state]
        if node.op == "output":
            out.append(_node(node.name, "output", "", inputs, params, None, None))
        elif node.op == "call_function":
            shape, dtype = _tensor_meta(node.meta.get("val"))
            out.append(_node(node.name, _op(node.target), _module(node), inputs, params, shape, dtype))
    return out


def fx_nodes(model: Any, by_name: list[str] | None, inputs: list[Any]) -> list[dict[str, Any]]:
    """The graph torch.fx's symbolic trace makes where export cannot: calls of leaf modules, functions and
    methods (no ATen overloads, no shapes); a leaf module's node reads that module's own state."""
    import torch

    concrete = {name: None for name in _forward_parameters(model) if not by_name or name not in by_name}
    traced = torch.fx.symbolic_trace(model, concrete_args=concrete if by_name else None)
    modules = dict(model.named_modules())
    state_names = {id(v): k for k, v in model.state_dict(keep_vars=True).items()}
    out: list[dict[str, Any]] = []
    for node in traced.graph.nodes:
        inputs = [n.name for n in node.all_input_nodes if n.op != "get_attr"]
        params = [state_names[id(v)] for n in node.all_input_nodes if n.op == "get_attr"
                  and id(v := _attr(model, str(n.target))) in state_names]
        if node.op == "placeholder":
            out.append(_node(node.name, "input", "", [], [], None, None))
        elif node.op == "call_module":
            module = modules.get(str(node.target))
            own = [state_names[id(v)] for v in module.state_dict(keep_vars=True).values()] if module is not None \
                else []
            kind = f"{type(module).__module__}.{type(module).__qualname__}" if module is not None else "module"
            out.append(_node(node.name, kind, str(node.target), inputs, own, None, None))
        elif node.op in ("call_function", "call_method"):
            op = _op(node.target) if node.op == "call_function" else f"Tensor.{node.target}"
            out.append(_node(node.name, op, "", inputs, params, None, None))
        elif node.op == "output":
            out.append(_node(node.name, "output", "", inputs, params, None, None))
    return out


def _forward_parameters(model: Any) -> list[str]:
    import inspect

    return [p.name for p in inspect.signature(model.forward).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _attr(model: Any, dotted: str) -> Any:
    value = model
    for part in dotted.split("."):
        value = getattr(value, part, None)
    return value


def _node(node_id: str, op: str, module: str, inputs: list[str], params: list[str],
          shape: list[int | str] | None, dtype: str | None) -> dict[str, Any]:
    return {"id": node_id, "op": op, "module": module, "inputs": list(dict.fromkeys(inputs)),
            "params": list(dict.fromkeys(params)), "shape": shape, "dtype": dtype}
