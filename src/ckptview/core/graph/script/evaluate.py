"""TorchScript code read as a graph: a walk over its syntax trees that inlines every call, never runs one.

The top module's `forward` is walked statement by statement. `self.<name>` is the attribute of that module
in the archive's module tree (data.pkl, read by the safe VM): a submodule, whose class's `forward` is walked
in turn (inlined, nodes placed in the submodule's path), or a parameter or buffer, which is a checkpoint key.
A call that returns a tensor becomes one node (`torch.linear` -> `aten.linear`); calls that answer sizes and
flags, and values computed at run time, are followed no further. Both branches of an `if` are walked (as
torch's graph keeps both blocks) unless its condition is a literal of the code; a loop's body is walked
once. Every walk is bounded: steps, nesting, inlining depth; a method that calls itself is refused.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from ckptview.core.checkpoint import Node
from ckptview.core.graph.limits import (
    MAX_GRAPH_NODES,
    MAX_INLINE_DEPTH,
    MAX_NOTES,
    MAX_STEPS,
    MAX_SYNTAX_DEPTH,
    GraphRefused,
)
from ckptview.core.graph.model import INPUT_OP, OUTPUT_OP, GraphNode
from ckptview.core.graph.script.code import ScriptCode, dotted_name
from ckptview.core.graph.script.ops import (
    BINARY,
    COMPARE,
    FACTORIES,
    LIST_EDITS,
    NOT_TENSORS,
    PASS_THROUGH,
    UNARY,
    op_name,
)
from ckptview.core.graph.script.values import (
    MAX_SEQ,
    UNKNOWN,
    Const,
    Dotted,
    Flow,
    Method,
    Mod,
    Seq,
    flow_of,
    has_data,
    merge,
)

_GLOBALS = {"torch", "ops", "__torch__", "CONSTANTS", "getattr", "annotate", "unchecked_cast", "uninitialized",
            "range", "len", "int", "float", "bool", "str", "print", "isinstance", "list", "tuple", "dict",
            "Tensor", "List", "Tuple", "Dict", "Optional", "Union", "NoneType", "Any", "Final", "Future",
            "enumerate", "zip", "min", "max", "abs", "round", "hash", "ord", "chr", "divmod", "sorted"}
_CHECK_EVERY = 4096  # steps between cancel checks


class _Frame:
    """One inlined call: its names, the module it runs in (where its nodes are placed), what it returned."""

    def __init__(self, module: str, env: dict[str, Any]) -> None:
        self.module = module
        self.env = env
        self.returns: list[Any] = []


class ScriptGraph:
    """The nodes of one archive's forward, built by walking its code."""

    def __init__(self, code: ScriptCode, root: Node, constants: Node | None,
                 check: Callable[[], None] | None = None) -> None:
        self.code, self.root, self.constants, self.check = code, root, constants, check
        self.nodes: list[GraphNode] = []
        self.notes: list[str] = []
        self.steps = 0
        self.depth = 0
        self.calls: list[tuple[str, str]] = []  # (class or function, method) of the calls being inlined
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}
        self._children: dict[int, dict[Any, Node]] = {}

    # -------------------------------------------------------------------------------------------- entry

    def forward(self) -> None:
        """Walk the top module's `forward`: input nodes, every op inlined, one output node."""
        top = Mod("", self.root, self.root.type_name)
        klass = self.code.cls(top.cls)
        method = klass.methods.get("forward") if klass is not None else None
        if method is None:
            raise GraphRefused(f"TorchScript archive: no code for {top.cls[:120]}.forward")
        args: list[Any] = []
        for arg in method.args.args[1:]:
            node_id = self._unique(arg.arg)
            self._append(GraphNode(node_id, INPUT_OP))
            args.append(Flow((node_id,)))
        result = self._call(method, top, args, {}, top.path, top.cls)
        flow = flow_of([result])
        self._append(GraphNode(self._unique(OUTPUT_OP), OUTPUT_OP, "", flow.ids, flow.keys))

    # ------------------------------------------------------------------------------------------- nodes

    def _unique(self, base: str) -> str:
        """`base`, or `base_N` with the next N not taken (torch.fx's naming; a counter per base, so a
        million nodes of one op cost a million steps, not a million squared)."""
        n = self._next.get(base, 0)
        candidate = base if n == 0 else f"{base}_{n}"
        while candidate in self._taken:
            n += 1
            candidate = f"{base}_{n}"
        self._next[base] = n + 1
        self._taken.add(candidate)
        return candidate

    def _append(self, node: GraphNode) -> None:
        if len(self.nodes) >= MAX_GRAPH_NODES:
            raise GraphRefused(f"TorchScript code yields more than {MAX_GRAPH_NODES:,} nodes")
        self.nodes.append(node)

    def _emit(self, op: str, args: list[Any], module: str) -> Flow:
        flow = flow_of(args)
        node_id = self._unique(op.rsplit(".", 1)[-1])
        self._append(GraphNode(node_id, op, module, flow.ids, flow.keys))
        return Flow((node_id,))

    def _note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < MAX_NOTES:
            self.notes.append(text)

    def _step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise GraphRefused(f"TorchScript code takes more than {MAX_STEPS:,} steps to read as a graph "
                               "(calls that fan out at every level)")
        if self.check is not None and self.steps % _CHECK_EVERY == 0:
            self.check()

    # ------------------------------------------------------------------------------------------- calls

    def _call(self, func: ast.FunctionDef, mod: Mod | None, args: list[Any], kwargs: dict[str, Any],
              module: str, owner: str) -> Any:
        """Inline `func` (a method of `mod`, or a free function) with its arguments bound."""
        call = (owner, func.name)
        if call in self.calls:
            raise GraphRefused(f"TorchScript code: {owner[:100]}.{func.name[:60]} calls itself (recursion, which "
                               "TorchScript does not compile); not drawn")
        if len(self.calls) >= MAX_INLINE_DEPTH:
            raise GraphRefused(f"TorchScript code nests calls more than {MAX_INLINE_DEPTH} deep")
        params = func.args.args
        env: dict[str, Any] = {}
        if mod is not None and params:
            env[params[0].arg] = mod
            params = params[1:]
        defaults = func.args.defaults
        first_default = len(params) - len(defaults)
        for i, param in enumerate(params):
            if i < len(args):
                env[param.arg] = args[i]
            elif param.arg in kwargs:
                env[param.arg] = kwargs[param.arg]
            elif i >= first_default:
                env[param.arg] = self._literal(defaults[i - first_default])
            else:
                env[param.arg] = UNKNOWN
        frame = _Frame(module, env)
        self.calls.append(call)
        try:
            self._block(func.body, frame, 0)
        finally:
            self.calls.pop()
        if not frame.returns:
            return UNKNOWN
        result = frame.returns[0]
        for other in frame.returns[1:]:
            result = merge(result, other)
        return result

    def _literal(self, expr: ast.expr) -> Any:
        if isinstance(expr, ast.Constant):
            return Const(expr.value)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return Seq([Const(e.value) if isinstance(e, ast.Constant) else UNKNOWN for e in expr.elts[:MAX_SEQ]])
        return UNKNOWN

    def _invoke(self, func: Any, args: list[Any], kwargs: dict[str, Any], frame: _Frame) -> Any:
        if isinstance(func, Method):
            return self._method(func, args, kwargs)
        if isinstance(func, Dotted):
            return self._global_call(func.name, args, kwargs, frame)
        # A call of something the graph does not follow (an object's method): its tensors flow through.
        values = [*args, *kwargs.values(), func]
        return flow_of(values) if any(has_data(v) for v in values) else UNKNOWN

    def _method(self, method: Method, args: list[Any], kwargs: dict[str, Any]) -> Any:
        klass = self.code.cls(method.mod.cls)
        func = klass.methods.get(method.name) if klass is not None else None
        if func is None:
            self._note(f"no code for {method.mod.cls[:120]}.{method.name[:60]} in the archive: its ops are not drawn")
            values = [*args, *kwargs.values()]
            return flow_of(values) if any(has_data(v) for v in values) else UNKNOWN
        return self._call(func, method.mod, args, kwargs, method.mod.path, method.mod.cls)

    def _global_call(self, name: str, args: list[Any], kwargs: dict[str, Any], frame: _Frame) -> Any:
        op = op_name(name)
        if op is not None:
            short = op.rsplit(".", 1)[-1]
            if short in PASS_THROUGH:
                return args[-1] if args else UNKNOWN
            if short in LIST_EDITS:
                if args and isinstance(args[0], Seq) and len(args[0].items) < MAX_SEQ:
                    added = args[-1]
                    args[0].items.extend(added.items if short == "extend" and isinstance(added, Seq) else [added])
                return UNKNOWN
            if short in NOT_TENSORS:
                return UNKNOWN
            values = [*args, *kwargs.values()]
            if short in FACTORIES or any(has_data(v) for v in values):
                return self._emit(op, values, frame.module)
            return UNKNOWN
        if name in ("annotate", "unchecked_cast"):
            return args[-1] if args else UNKNOWN
        if name in ("list", "tuple"):
            return Seq(list(args[0].items)) if args and isinstance(args[0], Seq) else (args[0] if args else UNKNOWN)
        if name == "getattr" and len(args) >= 2 and isinstance(args[1], Const) and isinstance(args[1].value, str):
            return self._attribute(args[0], args[1].value)
        if name.startswith("__torch__."):
            func = self.code.function(name)
            if func is not None:
                return self._call(func, None, args, kwargs, frame.module, name)
            if self.code.cls(name) is None:
                self._note(f"no code for {name[:120]} in the archive: its ops are not drawn")
        values = [*args, *kwargs.values()]  # a builtin, a class of the code (a NamedTuple): data flows through
        return flow_of(values) if any(has_data(v) for v in values) else UNKNOWN

    # --------------------------------------------------------------------------------------- attributes

    def _attribute(self, value: Any, name: str) -> Any:
        if isinstance(value, Mod):
            return self._module_attribute(value, name)
        if isinstance(value, Dotted):
            if value.name == "CONSTANTS":
                return self._constant(name)
            return Dotted(f"{value.name}.{name}")
        if has_data(value):
            return flow_of([value])  # a field of a tuple-like value: its tensors
        return UNKNOWN

    def _module_attribute(self, mod: Mod, name: str) -> Any:
        child = self._child(mod.node, name)
        if child is not None:
            return self._tree_value(child, mod.child_path(name))
        klass = self.code.cls(mod.cls)
        if klass is not None:
            if name in klass.methods:
                return Method(mod, name)
            if name in klass.constants:
                return self._literal(klass.constants[name])
            if name in klass.annotations:  # a submodule the tree does not hold (an empty container)
                return Mod(mod.child_path(name), None, klass.annotations[name])
        return UNKNOWN  # an attribute set at run time (`training`, an int): not followed

    def _tree_value(self, node: Node, path: str, depth: int = 0) -> Any:
        if node.kind == "tensor":
            return Flow((), (node.name,))
        if node.kind == "object":
            return Mod(path, node, node.type_name)
        if node.kind in ("list", "tuple") and depth < 8:
            return Seq([self._tree_value(c, f"{path}.{c.key}", depth + 1) for c in node.children[:MAX_SEQ]])
        return UNKNOWN

    def _constant(self, name: str) -> Any:
        if not (name.startswith("c") and name[1:].isdigit()):
            return UNKNOWN
        child = self._child(self.constants, int(name[1:]))
        if child is None:
            return UNKNOWN
        if child.kind == "value":
            return Const(child.value)
        return self._tree_value(child, child.name)

    def _child(self, node: Node | None, key: Any) -> Node | None:
        """A child of a tree node by key (an index per node: a module of 100,000 children is looked up often)."""
        if node is None:
            return None
        index = self._children.get(id(node))
        if index is None:
            index = self._children[id(node)] = {}
            for child in node.children:
                index.setdefault(child.key, child)
        return index.get(key)

    # ------------------------------------------------------------------------------------------- statements

    def _block(self, body: list[ast.stmt], frame: _Frame, depth: int) -> bool:
        """Walk statements in order; True when the block ended in a return, break or continue."""
        return any(self._statement(stmt, frame, depth) for stmt in body)  # stops at the first that ends it

    def _statement(self, stmt: ast.stmt, frame: _Frame, depth: int) -> bool:
        self._step()
        if depth > MAX_SYNTAX_DEPTH:
            raise GraphRefused(f"TorchScript code nests statements more than {MAX_SYNTAX_DEPTH} deep")
        env = frame.env
        if isinstance(stmt, ast.Assign):
            value = self._eval(stmt.value, frame, 0)
            for target in stmt.targets:
                self._assign(target, value, env)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self._assign(stmt.target, self._eval(stmt.value, frame, 0), env)
        elif isinstance(stmt, ast.AugAssign):
            value = self._eval(stmt.value, frame, 0)
            if isinstance(stmt.target, ast.Name):
                current = env.get(stmt.target.id, UNKNOWN)
                op = BINARY.get(type(stmt.op).__name__)
                if op is not None and (has_data(current) or has_data(value)):
                    env[stmt.target.id] = self._emit(f"aten.{op}_", [current, value], frame.module)
        elif isinstance(stmt, ast.Expr):
            self._eval(stmt.value, frame, 0)
        elif isinstance(stmt, ast.Return):
            frame.returns.append(UNKNOWN if stmt.value is None else self._eval(stmt.value, frame, 0))
            return True
        elif isinstance(stmt, ast.If):
            return self._if(stmt, frame, depth)
        elif isinstance(stmt, (ast.For, ast.While)):
            if isinstance(stmt, ast.For):
                items = self._eval(stmt.iter, frame, 0)
                element = flow_of(items.items) if isinstance(items, Seq) and any(map(has_data, items.items)) \
                    else flow_of([items]) if has_data(items) else UNKNOWN
                self._assign(stmt.target, element, env)
            else:
                self._eval(stmt.test, frame, 0)
            self._block(stmt.body, frame, depth + 1)  # once: a loop's body is one block of torch's graph too
            self._block(stmt.orelse, frame, depth + 1)
        elif isinstance(stmt, (ast.Break, ast.Continue)):
            return True
        elif isinstance(stmt, ast.With):
            for item in stmt.items:
                self._eval(item.context_expr, frame, 0)
            return self._block(stmt.body, frame, depth + 1)
        elif isinstance(stmt, ast.Raise):
            if stmt.exc is not None:
                self._eval(stmt.exc, frame, 0)
            return True
        elif isinstance(stmt, ast.Assert):
            self._eval(stmt.test, frame, 0)
        # pass, del, global, nested definitions: nothing to draw
        return False

    def _if(self, stmt: ast.If, frame: _Frame, depth: int) -> bool:
        test = self._eval(stmt.test, frame, 0)
        if isinstance(test, Const) and isinstance(test.value, (bool, int, type(None), str)):
            return self._block(stmt.body if test.value else stmt.orelse, frame, depth + 1)  # a literal: folded
        before = frame.env
        frame.env = dict(before)
        ended_body = self._block(stmt.body, frame, depth + 1)
        body_env = frame.env
        frame.env = dict(before)
        ended_else = self._block(stmt.orelse, frame, depth + 1)
        else_env = frame.env
        if ended_body and ended_else:
            frame.env = before
            return True
        if ended_body or ended_else:
            frame.env = else_env if ended_body else body_env
        else:
            frame.env = {name: merge(body_env.get(name, UNKNOWN), else_env.get(name, UNKNOWN))
                         for name in dict.fromkeys([*body_env, *else_env])}
        return False

    def _assign(self, target: ast.expr, value: Any, env: dict[str, Any]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.items if isinstance(value, Seq) and len(value.items) == len(target.elts) else None
            for i, element in enumerate(target.elts):
                # A multi-output op (`a, b = torch.chunk(...)`): every name is that op's output.
                self._assign(element, items[i] if items is not None else value, env)
        # `self.x = ...`, `l[0] = ...`: no name changes meaning

    # ------------------------------------------------------------------------------------------ expressions

    def _eval(self, expr: ast.expr, frame: _Frame, depth: int) -> Any:
        self._step()
        if depth > MAX_SYNTAX_DEPTH:
            raise GraphRefused(f"TorchScript code nests an expression more than {MAX_SYNTAX_DEPTH} deep")
        deeper = depth + 1
        if isinstance(expr, ast.Constant):
            return Const(expr.value)
        if isinstance(expr, ast.Name):
            if expr.id in frame.env:
                return frame.env[expr.id]
            return Dotted(expr.id) if expr.id in _GLOBALS else UNKNOWN
        if isinstance(expr, ast.Attribute):
            dotted = dotted_name(expr)
            if dotted is not None and dotted.split(".", 1)[0] not in frame.env:
                return Dotted(dotted) if not dotted.startswith("CONSTANTS.") else self._constant(expr.attr)
            return self._attribute(self._eval(expr.value, frame, deeper), expr.attr)
        if isinstance(expr, ast.Call):
            func = self._eval(expr.func, frame, deeper)
            args: list[Any] = []
            for arg in expr.args:
                value = self._eval(arg.value if isinstance(arg, ast.Starred) else arg, frame, deeper)
                args.extend(value.items if isinstance(arg, ast.Starred) and isinstance(value, Seq) else [value])
            kwargs = {k.arg: self._eval(k.value, frame, deeper) for k in expr.keywords if k.arg is not None}
            return self._invoke(func, args, kwargs, frame)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return Seq([self._eval(e, frame, deeper) for e in expr.elts[:MAX_SEQ]])
        if isinstance(expr, ast.Dict):
            return Seq([self._eval(v, frame, deeper) for v in expr.values[:MAX_SEQ]])
        if isinstance(expr, ast.Subscript):
            value = self._eval(expr.value, frame, deeper)
            index = self._eval(expr.slice, frame, deeper)
            if isinstance(value, Seq):
                if isinstance(index, Const) and isinstance(index.value, int) and -len(value.items) <= index.value \
                        < len(value.items):
                    return value.items[index.value]
                return flow_of(value.items) if any(map(has_data, value.items)) else UNKNOWN
            return value if isinstance(value, (Flow, Dotted)) else UNKNOWN
        if isinstance(expr, ast.BinOp):
            left, right = self._eval(expr.left, frame, deeper), self._eval(expr.right, frame, deeper)
            op = BINARY.get(type(expr.op).__name__)
            if op is not None and (has_data(left) or has_data(right)):
                return self._emit(f"aten.{op}", [left, right], frame.module)
            return UNKNOWN
        if isinstance(expr, ast.Compare):
            values = [self._eval(expr.left, frame, deeper), *(self._eval(c, frame, deeper) for c in expr.comparators)]
            op = COMPARE.get(type(expr.ops[0]).__name__) if len(expr.ops) == 1 else None
            if op is not None and any(map(has_data, values)):
                return self._emit(f"aten.{op}", values, frame.module)
            return UNKNOWN
        if isinstance(expr, ast.UnaryOp):
            operand = self._eval(expr.operand, frame, deeper)
            op = UNARY.get(type(expr.op).__name__)
            if op is not None and has_data(operand):
                return self._emit(f"aten.{op}", [operand], frame.module)
            if isinstance(expr.op, ast.Not) and isinstance(operand, Const):
                return Const(not operand.value)
            return UNKNOWN
        if isinstance(expr, ast.BoolOp):
            for value in expr.values:
                self._eval(value, frame, deeper)
            return UNKNOWN
        if isinstance(expr, ast.IfExp):
            self._eval(expr.test, frame, deeper)
            return merge(self._eval(expr.body, frame, deeper), self._eval(expr.orelse, frame, deeper))
        if isinstance(expr, ast.Starred):
            return self._eval(expr.value, frame, deeper)
        return UNKNOWN  # comprehensions, lambdas, f-strings: no tensor op TorchScript prints this way


