"""TorchScript code read as a graph: a walk over its syntax trees that inlines every call, never runs one.

The top module's `forward` is walked statement by statement. `self.<name>` is the attribute of that module
in the archive's module tree (data.pkl, read by the safe VM): a submodule, whose class's `forward` is walked
in turn (inlined, nodes placed in the submodule's path), or a parameter or buffer, which is a checkpoint key.
A call that returns a tensor becomes one node (`torch.linear` -> `aten.linear`); calls that answer sizes and
flags, and values computed at run time, are followed no further. Both branches of an `if` are walked, as
torch's inlined graph keeps both blocks, except where torch folds the condition: a constant of a callee's own
code (see `values.Const.folds`); a loop's body is walked once. A method that calls itself is refused.

Every unit of work is charged to the graph's `Budget`: each statement and expression walked, each level of
nesting (calls, blocks, expressions, summed against the stack), each name bound, each list item unfolded,
each node and edge emitted. An `if` costs the names its branches bind, never a copy of every name in scope:
the branches write into the one table of names and an undo log restores it between them.
"""

from __future__ import annotations

import ast
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Node
from ckptview.core.graph.limits import MAX_GRAPH_NODES, MAX_NOTES, GraphRefused
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
from ckptview.core.graph.script.values import UNKNOWN, Const, Dotted, Flow, Flows, Method, Mod, Seq

_GLOBALS = {"torch", "ops", "__torch__", "CONSTANTS", "getattr", "annotate", "unchecked_cast", "uninitialized",
            "range", "len", "int", "float", "bool", "str", "print", "isinstance", "list", "tuple", "dict",
            "Tensor", "List", "Tuple", "Dict", "Optional", "Union", "NoneType", "Any", "Final", "Future",
            "enumerate", "zip", "min", "max", "abs", "round", "hash", "ord", "chr", "divmod", "sorted"}
NODE_COST = 16
"""Units one node costs (a GraphNode and its id hold ~250 bytes); each edge costs one more."""
STEP = 2
"""Units each call, block, statement and expression walked costs (~1.5 microseconds of CPU each)."""
_UNBOUND = object()  # a name's value before a branch bound it, when it had none


class _Frame:
    """One inlined call: its names, the module it runs in (where its nodes are placed), what it returned."""

    __slots__ = ("env", "log", "module", "returns", "root")

    def __init__(self, module: str, env: dict[str, Any], root: bool) -> None:
        self.module = module
        self.env = env
        self.returns: list[Any] = []
        self.log: dict[str, Any] | None = None
        """The innermost branch being walked: each name it bound, with the value that name had before."""
        self.root = root
        """The top module's own `forward`, whose graph torch never constant-folds."""


class ScriptGraph:
    """The nodes of one archive's forward, built by walking its code; every unit of work charged to `budget`."""

    def __init__(self, code: ScriptCode, root: Node, constants: Node | None, budget: Budget) -> None:
        self.code, self.root, self.constants, self.budget = code, root, constants, budget
        self.flows = Flows(budget)
        self.nodes: list[GraphNode] = []
        self.notes: list[str] = []
        self.calls: list[tuple[str, str]] = []  # (class or function, method) of the calls being inlined
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}
        self._children: dict[int, dict[Any, Node]] = {}
        self._tree_values: dict[int, Any] = {}

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
        flow = self.flows.flow(result)
        self._append(GraphNode(self._unique(OUTPUT_OP), OUTPUT_OP, "", flow.ids, flow.keys))

    # ------------------------------------------------------------------------------------------- nodes

    def _unique(self, base: str) -> str:
        """`base`, or `base_N` with the next N not taken (torch.fx's naming; a counter per base, so a
        million nodes of one op cost a million steps, not a million squared)."""
        n = self._next.get(base, 0)
        candidate = base if n == 0 else f"{base}_{n}"
        while candidate in self._taken:  # each name taken is skipped at most once per base
            self.budget.charge(1, "node names tried")
            n += 1
            candidate = f"{base}_{n}"
        self._next[base] = n + 1
        self._taken.add(candidate)
        return candidate

    def _append(self, node: GraphNode) -> None:
        if len(self.nodes) >= MAX_GRAPH_NODES:
            raise GraphRefused(f"TorchScript code yields more than {MAX_GRAPH_NODES:,} nodes, more than a graph "
                               "is drawn with")
        self.budget.charge(NODE_COST + len(node.inputs) + len(node.params), "nodes and edges")
        self.nodes.append(node)

    def _emit(self, op: str, args: list[Any], module: str) -> Flow:
        flow = self.flows.of(args)
        node_id = self._unique(op.rsplit(".", 1)[-1])
        self._append(GraphNode(node_id, op, module, flow.ids, flow.keys))
        return Flow((node_id,))

    def _note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < MAX_NOTES:
            self.notes.append(text)

    def _data(self, values: list[Any]) -> Any:
        """What a call the graph does not follow hands back: the tensors of its arguments, or UNKNOWN."""
        flow = self.flows.of(values)
        return flow if flow.ids or flow.keys else UNKNOWN

    # ------------------------------------------------------------------------------------------- calls

    def _call(self, func: ast.FunctionDef, mod: Mod | None, args: list[Any], kwargs: dict[str, Any],
              module: str, owner: str) -> Any:
        """Inline `func` (a method of `mod`, or a free function) with its arguments bound."""
        call = (owner, func.name)
        if call in self.calls:
            raise GraphRefused(f"TorchScript code: {owner[:100]}.{func.name[:60]} calls itself (recursion, which "
                               "TorchScript does not compile); not drawn")
        budget = self.budget
        budget.enter("a call", STEP)
        try:
            from_root = len(self.calls) == 1  # literals the top forward hands on are never folded (Const.folds)
            params = func.args.args
            env: dict[str, Any] = {}
            if mod is not None and params:
                env[params[0].arg] = mod
                params = params[1:]
            budget.charge(len(params) + 1, "names bound")
            defaults = func.args.defaults
            first_default = len(params) - len(defaults)
            for i, param in enumerate(params):
                if i < len(args):
                    value = args[i]
                elif param.arg in kwargs:
                    value = kwargs[param.arg]
                elif i >= first_default:
                    value = self._literal(defaults[i - first_default])
                else:
                    value = UNKNOWN
                env[param.arg] = Const(value.value, False) if from_root and type(value) is Const else value
            frame = _Frame(module, env, root=not self.calls)
            self.calls.append(call)
            try:
                self._block(func.body, frame)
            finally:
                self.calls.pop()
            if not frame.returns:
                return UNKNOWN
            result = frame.returns[0]
            for other in frame.returns[1:]:
                result = self.flows.merge(result, other)
            return result
        finally:
            budget.leave()

    def _literal(self, expr: ast.expr) -> Any:
        if isinstance(expr, ast.Constant):
            return Const(expr.value)
        if isinstance(expr, (ast.Tuple, ast.List)):
            self.budget.charge(len(expr.elts) + 1, "values built")
            return Seq([Const(e.value) if isinstance(e, ast.Constant) else UNKNOWN for e in expr.elts])
        return UNKNOWN

    def _invoke(self, func: Any, args: list[Any], kwargs: dict[str, Any], frame: _Frame) -> Any:
        if isinstance(func, Method):
            return self._method(func, args, kwargs)
        if isinstance(func, Dotted):
            return self._global_call(func.name, args, kwargs, frame)
        # A call of something the graph does not follow (an object's method): its tensors flow through.
        return self._data([*args, *kwargs.values(), func])

    def _method(self, method: Method, args: list[Any], kwargs: dict[str, Any]) -> Any:
        klass = self.code.cls(method.mod.cls)
        func = klass.methods.get(method.name) if klass is not None else None
        if func is None:
            self._note(f"no code for {method.mod.cls[:120]}.{method.name[:60]} in the archive: its ops are not drawn")
            return self._data([*args, *kwargs.values()])
        return self._call(func, method.mod, args, kwargs, method.mod.path, method.mod.cls)

    def _global_call(self, name: str, args: list[Any], kwargs: dict[str, Any], frame: _Frame) -> Any:
        op = op_name(name)
        if op is not None:
            short = op.rsplit(".", 1)[-1]
            if short in PASS_THROUGH:
                return args[-1] if args else UNKNOWN
            if short in LIST_EDITS:
                if args and isinstance(args[0], Seq):
                    added = args[-1]
                    self.flows.extend(args[0], added.items if short == "extend" and isinstance(added, Seq)
                                      else [added])
                return UNKNOWN
            if short in NOT_TENSORS:
                return UNKNOWN
            values = [*args, *kwargs.values()]
            if short in FACTORIES or any(self.flows.has_data(v) for v in values):
                return self._emit(op, values, frame.module)
            return UNKNOWN
        if name in ("annotate", "unchecked_cast"):
            return args[-1] if args else UNKNOWN
        if name in ("list", "tuple"):
            if args and isinstance(args[0], Seq):
                self.budget.charge(len(args[0].items) + 1, "list items copied")
                return Seq(list(args[0].items))
            return args[0] if args else UNKNOWN
        if name == "getattr" and len(args) >= 2 and isinstance(args[1], Const) and isinstance(args[1].value, str):
            return self._attribute(args[0], args[1].value)
        if name.startswith("__torch__."):
            func = self.code.function(name)
            if func is not None:
                return self._call(func, None, args, kwargs, frame.module, name)
            if self.code.cls(name) is None:
                self._note(f"no code for {name[:120]} in the archive: its ops are not drawn")
        return self._data([*args, *kwargs.values()])  # a builtin, a class of the code (a NamedTuple)

    # --------------------------------------------------------------------------------------- attributes

    def _attribute(self, value: Any, name: str) -> Any:
        if isinstance(value, Mod):
            return self._module_attribute(value, name)
        if isinstance(value, Dotted):
            if value.name == "CONSTANTS":
                return self._constant(name)
            return Dotted(f"{value.name}.{name}")
        return self._data([value])  # a field of a tuple-like value: its tensors

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

    def _tree_value(self, node: Node, path: str) -> Any:
        """A node of the module tree as a value: a key, a module, or a list of those (built once per node)."""
        known = self._tree_values.get(id(node))
        if known is not None:
            return known
        budget = self.budget
        budget.enter("a list of modules", STEP)
        try:
            if node.kind == "tensor":
                value: Any = Flow((), (node.name,))
            elif node.kind == "object":
                value = Mod(path, node, node.type_name)
            elif node.kind in ("list", "tuple"):
                budget.charge(len(node.children) + 1, "values built")
                value = Seq([self._tree_value(c, f"{path}.{c.key}") for c in node.children])
            else:
                value = UNKNOWN
        finally:
            budget.leave()
        self._tree_values[id(node)] = value
        return value

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
            self.budget.charge(len(node.children) + 1, "module attributes indexed")
            index = self._children[id(node)] = {}
            for child in node.children:
                index.setdefault(child.key, child)
        return index.get(key)

    # ------------------------------------------------------------------------------------------- statements

    def _block(self, body: list[ast.stmt], frame: _Frame) -> bool:
        """Walk statements in order; True when the block ended in a return, break or continue."""
        budget = self.budget
        budget.enter("a block", STEP)
        try:
            for stmt in body:  # noqa: SIM110 - a loop, not any(): no generator frame per level of nesting
                if self._statement(stmt, frame):
                    return True  # what follows is not reached
            return False
        finally:
            budget.leave()

    def _set(self, frame: _Frame, name: str, value: Any) -> None:
        """Bind `name` in `frame`, remembering its value before when a branch is being walked."""
        self.budget.charge(1, "names bound")
        log = frame.log
        if log is not None and name not in log:
            log[name] = frame.env.get(name, _UNBOUND)
        frame.env[name] = value

    def _statement(self, stmt: ast.stmt, frame: _Frame) -> bool:
        budget = self.budget
        budget.enter("a statement", STEP)
        try:
            if isinstance(stmt, ast.Assign):
                value = self._eval(stmt.value, frame)
                for target in stmt.targets:
                    self._assign(target, value, frame)
            elif isinstance(stmt, ast.AnnAssign):
                if stmt.value is not None:
                    self._assign(stmt.target, self._eval(stmt.value, frame), frame)
            elif isinstance(stmt, ast.AugAssign):
                value = self._eval(stmt.value, frame)
                if isinstance(stmt.target, ast.Name):
                    current = frame.env.get(stmt.target.id, UNKNOWN)
                    op = BINARY.get(type(stmt.op).__name__)
                    if op is not None and (self.flows.has_data(current) or self.flows.has_data(value)):
                        self._set(frame, stmt.target.id, self._emit(f"aten.{op}_", [current, value], frame.module))
            elif isinstance(stmt, ast.Expr):
                self._eval(stmt.value, frame)
            elif isinstance(stmt, ast.Return):
                frame.returns.append(UNKNOWN if stmt.value is None else self._eval(stmt.value, frame))
                return True
            elif isinstance(stmt, ast.If):
                return self._if(stmt, frame)
            elif isinstance(stmt, (ast.For, ast.While)):
                if isinstance(stmt, ast.For):
                    items = self._eval(stmt.iter, frame)
                    self._assign(stmt.target, self._data([items]), frame)
                else:
                    self._eval(stmt.test, frame)
                self._block(stmt.body, frame)  # once: a loop's body is one block of torch's graph too
                self._block(stmt.orelse, frame)
            elif isinstance(stmt, (ast.Break, ast.Continue)):
                return True
            elif isinstance(stmt, ast.With):
                for item in stmt.items:
                    self._eval(item.context_expr, frame)
                return self._block(stmt.body, frame)
            elif isinstance(stmt, ast.Raise):
                if stmt.exc is not None:
                    self._eval(stmt.exc, frame)
                return True
            elif isinstance(stmt, ast.Assert):
                self._eval(stmt.test, frame)
            # pass, del, global, nested definitions: nothing to draw
            return False
        finally:
            budget.leave()

    def _folded(self, test: Any, frame: _Frame) -> bool | None:
        """The branch torch's inlined graph keeps alone (True: the body, False: the other), None for both."""
        if frame.root or not isinstance(test, Const) or not test.folds:
            return None
        if isinstance(test.value, (bool, int, type(None), str)):
            return bool(test.value)
        return None

    def _if(self, stmt: ast.If, frame: _Frame) -> bool:
        taken = self._folded(self._eval(stmt.test, frame), frame)
        if taken is not None:
            return self._block(stmt.body if taken else stmt.orelse, frame)
        outer = frame.log
        env = frame.env
        body_log: dict[str, Any] = {}
        frame.log = body_log
        ended_body = self._block(stmt.body, frame)
        body_values = self._undo(frame, body_log)
        else_log: dict[str, Any] = {}
        frame.log = else_log
        ended_else = self._block(stmt.orelse, frame)
        else_values = self._undo(frame, else_log)
        frame.log = outer
        if ended_body and ended_else:
            return True
        if ended_body or ended_else:  # only the other branch goes on: its names hold
            for name, value in (else_values if ended_body else body_values).items():
                self._set(frame, name, value)
            return False
        for name in dict.fromkeys([*body_values, *else_values]):
            before = env.get(name, UNKNOWN)
            self._set(frame, name, self.flows.merge(body_values.get(name, before), else_values.get(name, before)))
        return False

    def _undo(self, frame: _Frame, log: dict[str, Any]) -> dict[str, Any]:
        """The names a branch bound, with the values it gave them; the table of names as it was before it."""
        self.budget.charge(2 * len(log) + 1, "names bound")
        env = frame.env
        values = {name: env[name] for name in log}
        for name, before in log.items():
            if before is _UNBOUND:
                del env[name]
            else:
                env[name] = before
        return values

    def _assign(self, target: ast.expr, value: Any, frame: _Frame) -> None:
        if isinstance(target, ast.Name):
            self._set(frame, target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            budget = self.budget
            budget.enter("a target unpacked", STEP)
            try:
                items = value.items if isinstance(value, Seq) and len(value.items) == len(target.elts) else None
                for i, element in enumerate(target.elts):
                    # A multi-output op (`a, b = torch.chunk(...)`): every name is that op's output.
                    self._assign(element, items[i] if items is not None else value, frame)
            finally:
                budget.leave()
        # `self.x = ...`, `l[0] = ...`: no name changes meaning

    # ------------------------------------------------------------------------------------------ expressions

    def _eval(self, expr: ast.expr, frame: _Frame) -> Any:  # noqa: C901 - one branch per kind of expression
        budget = self.budget
        budget.enter("an expression", STEP)
        try:
            if isinstance(expr, ast.Constant):
                return Const(expr.value, not frame.root)
            if isinstance(expr, ast.Name):
                if expr.id in frame.env:
                    return frame.env[expr.id]
                return Dotted(expr.id) if expr.id in _GLOBALS else UNKNOWN
            if isinstance(expr, ast.Attribute):
                dotted = dotted_name(expr)
                if dotted is not None and dotted.split(".", 1)[0] not in frame.env:
                    budget.charge(dotted.count("."), "names read")
                    return Dotted(dotted) if not dotted.startswith("CONSTANTS.") else self._constant(expr.attr)
                return self._attribute(self._eval(expr.value, frame), expr.attr)
            if isinstance(expr, ast.Call):
                func = self._eval(expr.func, frame)
                args: list[Any] = []
                for arg in expr.args:
                    value = self._eval(arg.value if isinstance(arg, ast.Starred) else arg, frame)
                    if isinstance(arg, ast.Starred) and isinstance(value, Seq):
                        budget.charge(len(value.items), "values built")
                        args.extend(value.items)
                    else:
                        args.append(value)
                kwargs: dict[str, Any] = {}
                for keyword in expr.keywords:
                    if keyword.arg is not None:
                        kwargs[keyword.arg] = self._eval(keyword.value, frame)
                return self._invoke(func, args, kwargs, frame)
            if isinstance(expr, (ast.Tuple, ast.List, ast.Dict)):
                built = Seq()
                for element in expr.values if isinstance(expr, ast.Dict) else expr.elts:
                    built.items.append(self._eval(element, frame))
                return built
            if isinstance(expr, ast.Subscript):
                value = self._eval(expr.value, frame)
                index = self._eval(expr.slice, frame)
                if isinstance(value, Seq):
                    if isinstance(index, Const) and isinstance(index.value, int) and \
                            -len(value.items) <= index.value < len(value.items):
                        return value.items[index.value]
                    return self._data([value])
                return value if isinstance(value, (Flow, Dotted)) else UNKNOWN
            if isinstance(expr, ast.BinOp):
                left, right = self._eval(expr.left, frame), self._eval(expr.right, frame)
                op = BINARY.get(type(expr.op).__name__)
                if op is not None and (self.flows.has_data(left) or self.flows.has_data(right)):
                    return self._emit(f"aten.{op}", [left, right], frame.module)
                return UNKNOWN
            if isinstance(expr, ast.Compare):
                values = [self._eval(expr.left, frame)]
                for comparator in expr.comparators:
                    values.append(self._eval(comparator, frame))
                op = COMPARE.get(type(expr.ops[0]).__name__) if len(expr.ops) == 1 else None
                if op is not None and any(self.flows.has_data(v) for v in values):
                    return self._emit(f"aten.{op}", values, frame.module)
                return UNKNOWN
            if isinstance(expr, ast.UnaryOp):
                operand = self._eval(expr.operand, frame)
                op = UNARY.get(type(expr.op).__name__)
                if op is not None and self.flows.has_data(operand):
                    return self._emit(f"aten.{op}", [operand], frame.module)
                if isinstance(expr.op, ast.Not) and isinstance(operand, Const):
                    return Const(not operand.value, operand.folds)
                return UNKNOWN
            if isinstance(expr, ast.BoolOp):
                for value in expr.values:
                    self._eval(value, frame)
                return UNKNOWN
            if isinstance(expr, ast.IfExp):
                taken = self._folded(self._eval(expr.test, frame), frame)
                if taken is not None:
                    return self._eval(expr.body if taken else expr.orelse, frame)
                return self.flows.merge(self._eval(expr.body, frame), self._eval(expr.orelse, frame))
            if isinstance(expr, ast.Starred):
                return self._eval(expr.value, frame)
            return UNKNOWN  # comprehensions, lambdas, f-strings: no tensor op TorchScript prints this way
        finally:
            budget.leave()
