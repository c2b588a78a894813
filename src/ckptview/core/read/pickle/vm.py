"""A pickle virtual machine that never imports or calls anything named by the file.

It interprets the opcodes of protocols 0-5 itself. Globals become `GlobalRef` records. Calling one of
the rebuild functions torch writes (see `ckptview.core.read.pickle.torch_globals`) produces an inert value such as
a `TensorInfo`; calling or instantiating any other global produces a `StubObject` that records the
dotted name, the arguments and the state, so the tree of a full-model pickle can still be shown.

Every failure (truncation, stack underflow, bad memo index, unhashable key, ...) is raised as
`CheckpointFormatError` with a one-line message.

Its work is charged to the open's budget (`ckptview.core.budget`): `PICKLE_COST` for each pickle begun (a
file of countless tiny pickles), every byte of opcodes read (each opcode reads at least one and does a
bounded amount of work on what earlier opcodes pushed), and every element a call copies (`builtins.list`
of one memoized list, again and again).
"""

from __future__ import annotations

import _compat_pickle
import codecs
import functools
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.gc_policy import paused_gc

# Python 2 names that pickle's fix_imports maps to their Python 3 home (protocols 0-2): the same
# table the real Unpickler uses, so `commands.Popen` is reported as the `subprocess.Popen` it runs.
RENAMED_MODULES = {**_compat_pickle.IMPORT_MAPPING, "exceptions": "builtins"}
RENAMED_NAMES = _compat_pickle.NAME_MAPPING

PICKLE_COST = 4096
"""Units each pickle begun costs (a VM and its dispatch table, ~50 microseconds): a stream of a few bytes a
pickle stops after about a thousand of them at the budget's floor."""
COPIED = "elements copied by calls"
MAX_STRING_LINE = 1 << 20  # text opcodes (protocol 0) end with a newline within this many bytes


@dataclass(eq=False)
class GlobalRef:
    """A global the pickle names (module + qualified name). Never imported."""

    module: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"

    def __repr__(self) -> str:
        return self.dotted


_PLAIN_ARGS = (str, int, float, bool, type(None))


@dataclass(eq=False)
class StubObject:
    """What calling or instantiating an unknown global would have produced: a record, nothing ran."""

    cls: str
    args: tuple[Any, ...] = ()
    kwargs: dict[Any, Any] = field(default_factory=dict)
    state: Any = None
    items: dict[Any, Any] = field(default_factory=dict)  # SETITEM(S) on a dict subclass
    list_items: list[Any] = field(default_factory=list)  # APPEND(S) on a list subclass
    has_state: bool = False

    def __repr__(self) -> str:
        # Show plain arguments (PosixPath('runs', 'a'), datetime.date(2024, 1, 2)); never recurse.
        if self.args and len(self.args) <= 8 and all(type(a) in _PLAIN_ARGS for a in self.args):
            text = ", ".join(repr(a) if len(repr(a)) <= 200 else "..." for a in self.args)
            return f"{self.cls}({text})"
        return f"<{self.cls} object>"


class Mark:
    """The MARK sentinel on the stack."""


_MARK = Mark()

# Protocol-5 opcodes such as NEXT_BUFFER need out-of-band buffers that a file cannot carry.
_OPNAMES = {
    b"(": "MARK", b".": "STOP", b"0": "POP", b"1": "POP_MARK", b"2": "DUP", b"F": "FLOAT", b"I": "INT",
    b"J": "BININT", b"K": "BININT1", b"L": "LONG", b"M": "BININT2", b"N": "NONE", b"P": "PERSID",
    b"Q": "BINPERSID", b"R": "REDUCE", b"S": "STRING", b"T": "BINSTRING", b"U": "SHORT_BINSTRING",
    b"V": "UNICODE", b"X": "BINUNICODE", b"a": "APPEND", b"b": "BUILD", b"c": "GLOBAL", b"d": "DICT",
    b"}": "EMPTY_DICT", b"e": "APPENDS", b"g": "GET", b"h": "BINGET", b"i": "INST", b"j": "LONG_BINGET",
    b"l": "LIST", b"]": "EMPTY_LIST", b"o": "OBJ", b"p": "PUT", b"q": "BINPUT", b"r": "LONG_BINPUT",
    b"s": "SETITEM", b"t": "TUPLE", b")": "EMPTY_TUPLE", b"u": "SETITEMS", b"G": "BINFLOAT",
    b"\x80": "PROTO", b"\x81": "NEWOBJ", b"\x82": "EXT1", b"\x83": "EXT2", b"\x84": "EXT4",
    b"\x85": "TUPLE1", b"\x86": "TUPLE2", b"\x87": "TUPLE3", b"\x88": "NEWTRUE", b"\x89": "NEWFALSE",
    b"\x8a": "LONG1", b"\x8b": "LONG4", b"B": "BINBYTES", b"C": "SHORT_BINBYTES",
    b"\x8c": "SHORT_BINUNICODE", b"\x8d": "BINUNICODE8", b"\x8e": "BINBYTES8", b"\x8f": "EMPTY_SET",
    b"\x90": "ADDITEMS", b"\x91": "FROZENSET", b"\x92": "NEWOBJ_EX", b"\x93": "STACK_GLOBAL",
    b"\x94": "MEMOIZE", b"\x95": "FRAME", b"\x96": "BYTEARRAY8", b"\x97": "NEXT_BUFFER",
    b"\x98": "READONLY_BUFFER",
}

# Opcodes that share one handler (the handler receives the opcode name).
_HANDLERS = {
    "NEXT_BUFFER": "_op_buffer", "READONLY_BUFFER": "_op_buffer",
    "PUT": "_op_put", "MEMOIZE": "_op_put",
    "EXT1": "_op_ext", "EXT2": "_op_ext", "EXT4": "_op_ext",
    "PERSID": "_op_persid", "BINPERSID": "_op_persid",
}

_SIZED = frozenset({list, tuple, dict, set, frozenset, str, bytes, bytearray})

# The hot opcodes `_run` handles inline (they have no handler method).
_INLINED = frozenset({
    "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "MARK", "NONE", "NEWTRUE", "NEWFALSE", "BININT",
    "BININT1", "BININT2", "BINUNICODE", "SHORT_BINUNICODE", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
    "REDUCE",
})

# A callable emulation: receives the GlobalRef and the argument tuple, returns an inert value.
Emulator = Callable[[GlobalRef, tuple[Any, ...]], Any]


class SafeUnpickler:
    """Interprets one pickle from `data` starting at `pos`; see the module docstring."""

    def __init__(
        self,
        data: bytes | memoryview,
        *,
        pos: int = 0,
        emulators: dict[str, Emulator] | None = None,
        persistent_load: Callable[[Any], Any] | None = None,
        resolve_global: Callable[[GlobalRef], Any] | None = None,
        what: str = "pickle",
        budget: Budget | None = None,
    ) -> None:
        self.data = memoryview(data)
        self.pos = self.start = pos
        self.budget = budget if budget is not None else Budget.for_stored(len(self.data), f"the {what}")
        self.budget.charge(PICKLE_COST, "pickles begun")
        self.emulators = emulators or {}
        self.persistent_load = persistent_load
        self.resolve_global = resolve_global
        self.what = what
        self.globals_seen: dict[str, None] = {}  # ordered set of dotted names
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self._result: Any = None
        self.proto = 0  # until a PROTO opcode says otherwise (protocols 0 and 1 have none)
        self._stopped = False
        self._dispatch_list: list[Callable[[], None] | None] = [None] * 256
        for op, opname in _OPNAMES.items():
            if opname in _INLINED:  # handled in the loop of `_run` itself
                continue
            method = getattr(self, _HANDLERS.get(opname, "_op_" + opname.lower()))
            self._dispatch_list[op[0]] = (
                functools.partial(method, opname) if method.__code__.co_argcount > 1 else method
            )

    # -- errors -----------------------------------------------------------------------------------
    def _fail(self, message: str) -> CheckpointFormatError:
        return CheckpointFormatError(f"invalid {self.what}: {message} (at byte {self.pos})")

    # -- reading ----------------------------------------------------------------------------------
    def _read(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise self._fail(f"truncated: needs {n} more bytes, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def _readline(self) -> bytes:
        end = bytes(self.data[self.pos : self.pos + MAX_STRING_LINE]).find(b"\n")
        if end < 0:
            raise self._fail("truncated: text opcode without end of line")
        line = bytes(self.data[self.pos : self.pos + end])
        self.pos += end + 1
        return line

    def _unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self._read(size))[0]

    # -- stack ------------------------------------------------------------------------------------
    def _push(self, value: Any) -> None:
        # Arguments are evaluated before this runs, so a _pop_mark() inside them has already
        # swapped self.stack back to the enclosing stack.
        self.stack.append(value)

    def _pop(self) -> Any:
        if not self.stack:
            raise self._fail("stack underflow")
        value = self.stack.pop()
        if value is _MARK:
            raise self._fail("unexpected MARK")
        return value

    def _top(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise self._fail("stack underflow")
        return self.stack[-1]

    def _pop_mark(self) -> list[Any]:
        if not self.metastack:
            raise self._fail("no MARK on the stack")
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    # -- globals and calls ------------------------------------------------------------------------
    def _global(self, module: str, name: str) -> Any:
        if self.proto < 3:
            if (module, name) in RENAMED_NAMES:
                module, name = RENAMED_NAMES[(module, name)]
            else:
                module = RENAMED_MODULES.get(module, module)
        ref = GlobalRef(module, name)
        self.globals_seen.setdefault(ref.dotted, None)
        if self.resolve_global is not None and ref.dotted not in self.emulators:
            return self.resolve_global(ref)
        return ref

    def _charge(self, args: Any) -> None:
        """Charge the elements a call copies: a few bytes of pickle must not buy unbounded work.

        `builtins.list(big)` or `OrderedDict(big)` repeated on one memoized value copies it each time;
        an honest pickle copies each element about once, so the total is bounded by the file's size.
        """
        cost = len(args) if isinstance(args, (list, tuple)) else 0
        if isinstance(args, (list, tuple)):
            cost += sum(len(a) for a in args[:4] if isinstance(a, (list, tuple, dict, set, frozenset, str, bytes,
                                                                   bytearray)))
        self.budget.charge(cost, COPIED)

    def _call(self, func: Any, args: Any, kwargs: dict[str, Any] | None = None) -> Any:
        # Only calls handed a container can copy much (set(big), OrderedDict(big)); skipping the
        # charge for the rest keeps the hot path (two rebuild calls per tensor) cheap.
        if type(args) is not tuple or (args and type(args[0]) in _SIZED):
            self._charge(args)
        if not isinstance(args, tuple):
            if isinstance(args, list):
                args = tuple(args)
            else:
                raise self._fail(f"call arguments are a {type(args).__name__}, not a tuple")
        if isinstance(func, GlobalRef):
            emulate = self.emulators.get(func.dotted)
            if emulate is not None and not kwargs:
                try:
                    return emulate(func, args)
                except CheckpointFormatError:
                    raise
                except Exception as exc:  # a malformed call of a known function
                    raise self._fail(f"bad arguments to {func.dotted}: {exc}") from None
            return StubObject(func.dotted, args, dict(kwargs or {}))
        if isinstance(func, StubObject):
            return StubObject(f"{func.cls}(...)", args, dict(kwargs or {}))
        raise self._fail(f"cannot call a {type(func).__name__}")

    # -- the loop ---------------------------------------------------------------------------------
    def load(self) -> Any:
        """Run until STOP and return the unpickled (inert) object."""
        try:
            with paused_gc():
                result = self._run()
            self.budget.charge(self.pos - self.start, "bytes of pickle read")
            return result
        except CheckpointFormatError:
            raise
        except RecursionError:
            raise self._fail("nesting too deep") from None
        except MemoryError:
            raise self._fail("too large to hold in memory") from None
        except Exception as exc:  # anything else is a malformed pickle, never a crash
            raise self._fail(f"{type(exc).__name__}: {exc}") from None

    def _run(self) -> Any:  # noqa: C901 - the hot opcodes are inlined: this loop is the reader's cost
        data = self.data
        size = len(data)
        memo = self.memo
        dispatch = self._dispatch_list
        unpack_from = struct.unpack_from
        mark = _MARK
        pos = self.pos
        try:
            while True:  # bounded: each opcode reads at least one byte (charged when the pickle ends)
                if pos >= size:
                    self.pos = pos
                    raise self._fail("truncated: no STOP opcode")
                op = data[pos]
                pos += 1
                # Most frequent first (counted on torch.save'd state dicts): each test costs time.
                if op == 0x72:  # LONG_BINPUT
                    stack = self.stack
                    if not stack or stack[-1] is mark:
                        self.pos = pos
                        raise self._fail("stack underflow")
                    memo[unpack_from("<I", data, pos)[0]] = stack[-1]
                    pos += 4
                elif op == 0x4B:  # BININT1
                    self.stack.append(data[pos])
                    pos += 1
                elif op == 0x68:  # BINGET
                    idx = data[pos]
                    pos += 1
                    if idx not in memo:
                        self.pos = pos
                        raise self._fail(f"memo key {idx} was never stored")
                    self.stack.append(memo[idx])
                elif op == 0x71:  # BINPUT
                    stack = self.stack
                    if not stack or stack[-1] is mark:
                        self.pos = pos
                        raise self._fail("stack underflow")
                    memo[data[pos]] = stack[-1]
                    pos += 1
                elif op == 0x28:  # MARK
                    self.metastack.append(self.stack)
                    self.stack = []
                elif op == 0x58 or op == 0x8C:  # BINUNICODE, SHORT_BINUNICODE
                    if op == 0x58:
                        (length,) = unpack_from("<I", data, pos)
                        pos += 4
                    else:
                        length = data[pos]
                        pos += 1
                    if pos + length > size:
                        self.pos = pos
                        raise self._fail(f"truncated: needs {length} more bytes, {size - pos} left")
                    self.stack.append(str(data[pos : pos + length], "utf-8", "surrogatepass"))
                    pos += length
                elif op == 0x74:  # TUPLE
                    if not self.metastack:
                        self.pos = pos
                        raise self._fail("no MARK on the stack")
                    items = tuple(self.stack)
                    self.stack = self.metastack.pop()
                    self.stack.append(items)
                elif op == 0x86:  # TUPLE2
                    stack = self.stack
                    if len(stack) < 2 or stack[-1] is mark or stack[-2] is mark:
                        self.pos = pos
                        raise self._fail("stack underflow")
                    second = stack.pop()
                    stack[-1] = (stack[-1], second)
                elif op == 0x52:  # REDUCE
                    stack = self.stack
                    if len(stack) < 2 or stack[-1] is mark or stack[-2] is mark:
                        self.pos = pos
                        raise self._fail("stack underflow")
                    args = stack.pop()
                    func = stack.pop()
                    self.pos = pos
                    stack.append(self._call(func, args))
                elif op == 0x6A:  # LONG_BINGET
                    (idx,) = unpack_from("<I", data, pos)
                    pos += 4
                    if idx not in memo:
                        self.pos = pos
                        raise self._fail(f"memo key {idx} was never stored")
                    self.stack.append(memo[idx])
                elif op == 0x89:  # NEWFALSE
                    self.stack.append(False)
                elif op == 0x29:  # EMPTY_TUPLE
                    self.stack.append(())
                elif op == 0x85:  # TUPLE1
                    stack = self.stack
                    if not stack or stack[-1] is mark:
                        self.pos = pos
                        raise self._fail("stack underflow")
                    stack[-1] = (stack[-1],)
                elif op == 0x88:  # NEWTRUE
                    self.stack.append(True)
                elif op == 0x4E:  # NONE
                    self.stack.append(None)
                elif op == 0x4D:  # BININT2
                    self.stack.append(unpack_from("<H", data, pos)[0])
                    pos += 2
                elif op == 0x4A:  # BININT
                    self.stack.append(unpack_from("<i", data, pos)[0])
                    pos += 4
                else:
                    handler = dispatch[op]
                    self.pos = pos
                    if handler is None:
                        raise self._fail(f"unknown opcode {bytes([op])!r}")
                    handler()
                    pos = self.pos
                    if self._stopped:
                        return self._result
        except (struct.error, IndexError):
            self.pos = pos
            raise self._fail("truncated: the pickle ends inside an opcode") from None

    def _op_stop(self) -> None:
        self._result = self._pop()
        self._stopped = True

    def _op_proto(self) -> None:
        proto = self._read(1)[0]
        if proto > 5:
            raise self._fail(f"unsupported pickle protocol {proto}")
        self.proto = proto

    def _op_frame(self) -> None:
        self._read(8)


    def _op_pop(self) -> None:
        if self.stack:
            self.stack.pop()
        else:
            self._pop_mark()

    def _op_pop_mark(self) -> None:
        self._pop_mark()

    def _op_dup(self) -> None:
        self._push(self._top())







    def _op_int(self) -> None:
        self._push(_text_int(self._readline()))

    def _op_long(self) -> None:
        line = self._readline()
        self._push(int((line[:-1] if line.endswith(b"L") else line).split(b"\0", 1)[0], 0))

    def _op_long1(self) -> None:
        n = self._read(1)[0]
        self._push(int.from_bytes(self._read(n), "little", signed=True))

    def _op_long4(self) -> None:
        n = self._unpack("<i")
        if n < 0:
            raise self._fail("negative LONG4 length")
        self._push(int.from_bytes(self._read(n), "little", signed=True))

    def _op_float(self) -> None:
        self._push(float(self._readline()))

    def _op_binfloat(self) -> None:
        self._push(self._unpack(">d"))

    def _op_string(self) -> None:
        self._push(_decode_string_literal(self._readline()))

    def _op_binstring(self) -> None:
        n = self._unpack("<i")
        self._push(bytes(self._read(n)).decode("latin1"))

    def _op_short_binstring(self) -> None:
        self._push(bytes(self._read(self._read(1)[0])).decode("latin1"))

    def _op_unicode(self) -> None:
        self._push(self._readline().decode("raw-unicode-escape"))



    def _op_binunicode8(self) -> None:
        self._push(str(self._read(self._unpack("<Q")), "utf-8", "surrogatepass"))

    def _op_binbytes(self) -> None:
        self._push(bytes(self._read(self._unpack("<I"))))

    def _op_short_binbytes(self) -> None:
        self._push(bytes(self._read(self._read(1)[0])))

    def _op_binbytes8(self) -> None:
        self._push(bytes(self._read(self._unpack("<Q"))))

    def _op_bytearray8(self) -> None:
        self._push(bytearray(self._read(self._unpack("<Q"))))

    def _op_buffer(self, name: str) -> None:
        raise self._fail(f"{name} needs out-of-band buffers, which a file cannot provide")





    def _op_tuple3(self) -> None:
        c, b, a = self._pop(), self._pop(), self._pop()
        self._push((a, b, c))

    def _op_empty_list(self) -> None:
        self._push([])

    def _op_list(self) -> None:
        self._push(self._pop_mark())

    def _op_empty_dict(self) -> None:
        self._push({})

    def _op_dict(self) -> None:
        items = self._pop_mark()
        if len(items) % 2:
            raise self._fail("DICT with an odd number of items")
        self._push({items[i]: items[i + 1] for i in range(0, len(items), 2)})

    def _op_empty_set(self) -> None:
        self._push(set())

    def _op_frozenset(self) -> None:
        self._push(frozenset(self._pop_mark()))

    def _op_append(self) -> None:
        value = self._pop()
        self._append(self._top(), [value])

    def _op_appends(self) -> None:
        items = self._pop_mark()
        target = self._top()
        if items:  # nothing to add: CPython's unpickler does not look at the target, nor does this one
            self._append(target, items)

    def _op_setitem(self) -> None:
        value, key = self._pop(), self._pop()
        self._setitems(self._top(), [key, value])

    def _op_setitems(self) -> None:
        items = self._pop_mark()
        if len(items) % 2:
            raise self._fail("SETITEMS with an odd number of items")
        target = self._top()
        if items:  # nothing to set: the target is not looked at (as in CPython's unpickler)
            self._setitems(target, items)

    def _op_additems(self) -> None:
        items = self._pop_mark()
        target = self._top()
        if not items:  # nothing to add: the target is not looked at (as in CPython's unpickler)
            return
        if isinstance(target, set):
            target.update(items)
        elif isinstance(target, StubObject):
            target.list_items.extend(items)
        else:
            raise self._fail(f"ADDITEMS on a {type(target).__name__}")

    def _op_put(self, name: str) -> None:
        idx = int(self._readline()) if name == "PUT" else len(self.memo)  # PUT or MEMOIZE
        self.memo[idx] = self._top()

    def _op_get(self) -> None:
        idx = int(self._readline())
        if idx not in self.memo:
            raise self._fail(f"memo key {idx} was never stored")
        self._push(self.memo[idx])

    def _op_global(self) -> None:
        module = self._readline().decode("utf-8")
        qualname = self._readline().decode("utf-8")
        self._push(self._global(module, qualname))

    def _op_stack_global(self) -> None:
        qualname, module = self._pop(), self._pop()
        if not isinstance(module, str) or not isinstance(qualname, str):
            raise self._fail("STACK_GLOBAL needs two strings")
        self._push(self._global(module, qualname))

    def _op_ext(self, name: str) -> None:
        code = self._read(1)[0] if name == "EXT1" else self._unpack("<H" if name == "EXT2" else "<i")
        self._push(self._global("copyreg", f"<extension code {code}>"))


    def _op_newobj(self) -> None:
        args = self._pop()
        cls = self._pop()
        self._push(self._instantiate(cls, args, {}))

    def _op_newobj_ex(self) -> None:
        kwargs, args, cls = self._pop(), self._pop(), self._pop()
        self._push(self._instantiate(cls, args, kwargs if isinstance(kwargs, dict) else {}))

    def _op_inst(self) -> None:
        module = self._readline().decode("utf-8")
        qualname = self._readline().decode("utf-8")
        args = tuple(self._pop_mark())
        self._push(self._instantiate(self._global(module, qualname), args, {}))

    def _op_obj(self) -> None:
        items = self._pop_mark()
        if not items:
            raise self._fail("OBJ without a class")
        self._push(self._instantiate(items[0], tuple(items[1:]), {}))

    def _op_build(self) -> None:
        state = self._pop()
        self._build(self._top(), state)

    def _op_persid(self, name: str) -> None:
        pid = self._readline().decode("ascii") if name == "PERSID" else self._pop()
        if self.persistent_load is None:
            raise self._fail("persistent id in a pickle that should have none")
        self._push(self.persistent_load(pid))

    def _instantiate(self, cls: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if isinstance(cls, GlobalRef) and cls.dotted in self.emulators:
            return self._call(cls, args, kwargs or None)
        self._charge(args)
        if isinstance(cls, GlobalRef):
            return StubObject(cls.dotted, tuple(args) if isinstance(args, (tuple, list)) else (args,), kwargs)
        if isinstance(cls, StubObject):
            return StubObject(f"{cls.cls}(...)", tuple(args) if isinstance(args, (tuple, list)) else (args,))
        raise self._fail(f"cannot instantiate a {type(cls).__name__}")

    def _append(self, target: Any, items: list[Any]) -> None:
        if isinstance(target, list):
            target.extend(items)
        elif isinstance(target, StubObject):
            target.list_items.extend(items)
        else:
            raise self._fail(f"APPEND to a {type(target).__name__}")

    def _setitems(self, target: Any, items: list[Any]) -> None:
        if isinstance(target, dict):
            dest = target
        elif isinstance(target, StubObject):
            dest = target.items
        elif type(target) is list:  # item assignment by index, as CPython's unpickler does
            for i in range(0, len(items), 2):
                if type(items[i]) not in (int, bool):  # never a slice: one opcode, one element
                    raise self._fail(f"SETITEM on a list with a {type(items[i]).__name__} index")
                try:
                    target[items[i]] = items[i + 1]
                except IndexError:
                    raise self._fail("SETITEM on a list: index out of range") from None
            return
        else:
            raise self._fail(f"SETITEM on a {type(target).__name__}")
        for i in range(0, len(items), 2):
            try:
                dest[items[i]] = items[i + 1]
            except TypeError:
                raise self._fail(f"unhashable dict key of type {type(items[i]).__name__}") from None

    def _build(self, target: Any, state: Any) -> None:
        setstate = getattr(target, "__ckpt_setstate__", None)
        if setstate is not None:
            setstate(state)
        elif isinstance(target, StubObject):
            target.state = state
            target.has_state = True
        elif isinstance(target, dict) and isinstance(state, dict):
            # Attributes of a dict subclass (a state_dict's `_metadata`): not items of the dict.
            return
        elif state is None or (type(state) is tuple and len(state) == 2 and state[0] is None
                               and (state[1] is None or (isinstance(state[1], dict) and not state[1]))):
            # No state at all: CPython's unpickler sets nothing and goes on; so does this one.
            return
        else:
            # BUILD on a plain value: Python would call __setstate__ on it; we only record nothing ran.
            raise self._fail(f"BUILD on a {type(target).__name__}")


# C strtol(s, &end, 0): optional space and sign, then 0x-hex, 0-octal or decimal digits.
_STRTOL = re.compile(rb"[ \t\n\v\f\r]*([+-]?)(?:0[xX]([0-9a-fA-F]+)|(0[0-7]*)|([1-9][0-9]*))")


def _text_int(line: bytes) -> int:
    """INT's argument as CPython's C unpickler (the one torch.load uses) reads it.

    It tries C `strtol` with base 0 (so `0x1950...` is hex and `010` is octal), and when that leaves
    characters over or overflows, Python's `int(s, 0)`; `00`/`01` are the booleans of protocol 0.
    A C string ends at the first NUL byte. A magic number written any of these ways must be recognised.
    """
    text = line.split(b"\0", 1)[0]
    match = _STRTOL.match(text)
    if match is not None and match.end() == len(text):
        sign, hexa, octal, decimal = match.groups()
        value = int(hexa, 16) if hexa else int(octal, 8) if octal else int(decimal)
        value = -value if sign == b"-" else value
        if -(1 << 63) <= value < (1 << 63):
            return bool(value) if len(line) == 2 and value in (0, 1) else value
    return int(text, 0)


def _decode_string_literal(line: bytes) -> str:
    """Protocol-0 STRING: a quoted Python 2 str literal."""
    if len(line) < 2 or line[:1] != line[-1:] or line[:1] not in (b"'", b'"'):
        raise ValueError("STRING opcode argument must be quoted")
    return codecs.escape_decode(line[1:-1])[0].decode("latin1")


def unpickle(
    data: bytes | memoryview,
    *,
    emulators: dict[str, Emulator] | None = None,
    persistent_load: Callable[[Any], Any] | None = None,
    resolve_global: Callable[[GlobalRef], Any] | None = None,
    what: str = "pickle",
    pos: int = 0,
    budget: Budget | None = None,
) -> tuple[Any, list[str], int]:
    """Unpickle one object safely; returns (object, globals referenced in order, end position). Its work is
    charged to `budget` (one of the pickle's own bytes when none is given)."""
    vm = SafeUnpickler(data, pos=pos, emulators=emulators, persistent_load=persistent_load,
                       resolve_global=resolve_global, what=what, budget=budget)
    obj = vm.load()
    return obj, list(vm.globals_seen), vm.pos
