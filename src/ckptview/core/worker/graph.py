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

from ckptview.core.run.declared_sizes import Listing
from ckptview.core.run.input_specs import InputSpec
from ckptview.core.run.protocol import Job, WorkerError, one_line
from ckptview.core.worker.build_guard import guarded_build
from ckptview.core.worker.declared_inputs import NoDeclaredInputs, declared_inputs
from ckptview.core.worker.forward import keyword_names
from ckptview.core.worker.library import build, tie


def graph_job(job: Job) -> dict[str, Any]:
    """Build the request's architecture on meta, trace it; {"graph", "model_keys", "aliases", "tracer"}."""
    import torch

    req = job.request
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
        nodes, tracer = _trace(model, inputs, by_name, what, guard)
    guard.check(what)
    return {"graph": {"source": f"{arch.get('library')}:{arch.get('class')}", "nodes": nodes},
            "model_keys": list(model.state_dict()), "aliases": alias_groups(model), "tracer": tracer,
            "torch_version": torch.__version__}


def _trace(model: Any, inputs: list[Any], by_name: list[str] | None, what: str,
           guard: Any) -> tuple[list[dict[str, Any]], str]:
    """(nodes, tracer): torch.export with every input, then the first alone, then torch.fx."""
    import torch

    errors: list[str] = []
    for attempt in _attempts(inputs, by_name):
        try:
            with torch.no_grad():
                program = torch.export.export(model, *attempt, strict=False)
            return exported_nodes(program), "torch.export"
        except Exception as exc:  # noqa: BLE001 - a model export cannot trace: try with less, then fx
            if (refused := guard.message(what)) is not None:
                raise WorkerError(refused, kind="refused") from None
            errors.append(f"torch.export: {type(exc).__name__}: {one_line(exc)}")
    try:
        return fx_nodes(model, by_name, inputs), "torch.fx"
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
        raise WorkerError(str(exc), kind="input") from None


def _attempts(inputs: list[Any], by_name: list[str] | None) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(args, kwargs) to export with: every input; then the first alone (a mask some models read by value)."""
    full = ((), dict(zip(by_name, inputs, strict=True))) if by_name else (tuple(inputs), {})
    if len(inputs) < 2:
        return [full]
    first = ((), {by_name[0]: inputs[0]}) if by_name else ((inputs[0],), {})
    return [full, first]


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
