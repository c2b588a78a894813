"""The fast metadata path: CPython's C unpickler, restricted so that it behaves as the safe VM does.

`ckptview.core.read.pickle.vm.SafeUnpickler` (pure Python) is the reference; this module reaches the
same result about ten times faster, or declines (`fast_unpickle` returns None) and the caller runs
the reference. It is the "restricting globals" pattern of Python's documentation, made strict:

* A scan of the opcodes comes first (`scan`): it finds the end of the pickle, checks every length
  against the data, bounds every memo index by the pickle's size (the C unpickler allocates its memo
  up to twice the largest index it sees: 9 bytes could ask for gigabytes), and declines opcodes an
  honest torch pickle never holds (out-of-band buffers, bytearrays, extension codes, a second PROTO).
* `find_class` never imports: it returns our own inert objects (`GlobalRef` records, or the constants
  `resolve_constant` makes), and declines numpy's globals, `bytearray` and `slice`.
* Every object the C unpickler can touch is a plain builtin or one of our types, re-classed while the
  load runs to a guarded twin whose `__setstate__`, `append`, `extend`, `add` and `__setitem__` do
  exactly what the reference VM does (record on a stub, refuse elsewhere), so BUILD can never write
  attributes of our objects. After the load the objects get their own classes back.
* Calls are charged as the reference charges them, within what the open's budget has left, so a
  copy-amplifier pickle is refused here too; shared (memoised) objects stay shared, and the tree
  builder's charges bound their expansion.
* Anything unexpected (an exception of any kind, a budget exceeded, a decline) means: run the
  reference instead. The fast path never produces an error message of its own.
"""

from __future__ import annotations

import collections
import io
import pickle
import re
import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ckptview.core import dtypes
from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Storage, TensorInfo
from ckptview.core.gc_policy import paused_gc
from ckptview.core.read.pickle import torch_globals
from ckptview.core.read.pickle.vm import (
    COPIED,
    MAX_STRING_LINE,
    PICKLE_COST,
    RENAMED_MODULES,
    RENAMED_NAMES,
    Emulator,
    GlobalRef,
    StubObject,
)


class Decline(Exception):
    """The fast path cannot vouch for this pickle: the reference VM reads it instead."""


# -- the scan ---------------------------------------------------------------------------------------

# Opcodes without argument that the C unpickler may run as they are (STOP is handled by the loop).
_NO_ARG = b"()012NRabd}el]stu\x85\x86\x87\x88\x89\x8f\x90\x91\x93\x94Q\x81\x92"
_STOP = 0x2E


@lru_cache(maxsize=64)
def _run_pattern(bits: int) -> re.Pattern[bytes]:
    """A run of fixed-size opcodes; LONG_BINPUT only with an index below 2**bits (16 <= bits <= 32)."""
    if bits >= 32:
        put = rb"r...."
    elif bits >= 24:
        put = rb"r..." + b"[\\x00-" + b"\\x%02x" % ((1 << (bits - 24)) - 1) + b"]"
    else:
        put = rb"r.." + b"[\\x00-" + b"\\x%02x" % ((1 << (bits - 16)) - 1) + b"]\\x00"
    no_arg = b"".join(b"\\x%02x" % c for c in _NO_ARG)
    # Counted strings under 256 bytes (names, keys) too: one alternative per length byte, which the
    # regex engine tells apart by that byte alone.
    counted = b"|".join(_counted(op, width) for op, width in ((0x58, 4), (0x8C, 1), (0x55, 1), (0x43, 1)))
    # Possessive (*+): the engine keeps no backtracking state per opcode; frequent opcodes first.
    return re.compile(b"(?:q.|h.|K.|[" + no_arg + rb"]|M..|[Jj]....|G.{8}|" + put + b"|" + counted + b")*+", re.S)


def _counted(op: int, width: int) -> bytes:
    """Opcode `op`, a `width`-byte little-endian length under 256, then that many bytes."""
    lengths = b"|".join(re.escape(bytes([n]) + bytes(width - 1)) + (b".{%d}" % n if n else b"") for n in range(256))
    return re.escape(bytes([op])) + b"(?:" + lengths + b")"


_TEXT_LINES = {ord("I"): 1, ord("L"): 1, ord("F"): 1, ord("S"): 1, ord("V"): 1, ord("P"): 1, ord("g"): 1,
               ord("p"): 1, ord("c"): 2, ord("i"): 2}
# INT, LONG, FLOAT and GET arguments as pickle writes them; anything else is left to the reference.
_TEXT_NUMBERS = {
    ord("I"): re.compile(rb"-?(?:0|[1-9][0-9]*)|0[01]"),
    ord("L"): re.compile(rb"-?(?:0|[1-9][0-9]*)L?"),
    ord("F"): re.compile(rb"-?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|inf|nan)"),
    ord("g"): re.compile(rb"[0-9]+"),  # GET: C would read '1\0x' as 1
}
_LEN1 = frozenset(b"U\x8cC\x8a")  # a one-byte length, then the bytes
_LEN4 = frozenset(b"XB")  # four-byte unsigned length
_LEN4_SIGNED = frozenset(b"T\x8b")
_LEN8 = frozenset(b"\x8d\x8e")


class Scan:
    """What the scan learned: protocol, end position, and whether INST/OBJ occur (charged always)."""

    __slots__ = ("proto", "end", "instantiates")

    def __init__(self, proto: int, end: int, instantiates: bool) -> None:
        self.proto, self.end, self.instantiates = proto, end, instantiates


def scan(data: bytes | memoryview, pos: int = 0) -> Scan:
    """The opcodes of the pickle at `pos` checked (see the module docstring), or Decline.

    Memo indices are bounded by the pickle's own length: a pickle at the head of a large file (a
    legacy checkpoint, its tensor bytes after it) is scanned again within its end if that is tighter.
    """
    view = memoryview(data)
    found = _scan(view, pos)
    if _memo_bits(found.end - pos) < _memo_bits(len(view) - pos):
        found = _scan(view[: found.end], pos)
    return found


def _memo_bits(length: int) -> int:
    """Memo indices allowed for a pickle of `length` bytes: below 2**bits. The C unpickler's memo grows
    to twice the largest index, so this bounds it by 4 bytes per byte of pickle (at least 1 MiB);
    pickle itself writes one memo entry per ~50 bytes of a torch state dict."""
    return max(16, (length // 8).bit_length())


def _scan(view: memoryview, pos: int) -> Scan:
    size = len(view)
    proto = 0
    if pos + 1 < size and view[pos] == 0x80:
        proto = view[pos + 1]
        if proto > 5:
            raise Decline("protocol")
        pos += 2
    bits = _memo_bits(size - pos)
    limit = 1 << bits
    run = _run_pattern(min(bits, 32)).match
    unpack_from = struct.unpack_from
    instantiates = False
    try:
        while True:  # bounded: each step reads at least one opcode (the pickle is charged when it loads)
            skipped = run(view, pos)
            assert skipped is not None  # the pattern also matches no opcode at all: it always matches
            pos = skipped.end()
            if pos >= size:
                raise Decline("truncated")
            op = view[pos]
            if op == _STOP:
                return Scan(proto, pos + 1, instantiates)
            if op == 0x6F:  # OBJ
                instantiates = True
                pos += 1
                continue
            if op in _LEN4:
                pos += 5 + unpack_from("<I", view, pos + 1)[0]
            elif op in _LEN1:
                pos += 2 + view[pos + 1]
            elif op in _LEN4_SIGNED:
                length = unpack_from("<i", view, pos + 1)[0]
                if length < 0:
                    raise Decline("negative length")
                pos += 5 + length
            elif op in _LEN8:
                pos += 9 + unpack_from("<Q", view, pos + 1)[0]
            elif op == 0x95:  # FRAME: its content is ordinary opcodes, scanned as they come
                if unpack_from("<Q", view, pos + 1)[0] > size - pos - 9:
                    raise Decline("frame")
                pos += 9
            elif op in _TEXT_LINES:
                instantiates = instantiates or op == 0x69  # INST
                start = pos + 1
                for _ in range(_TEXT_LINES[op]):
                    end = bytes(view[start : start + MAX_STRING_LINE]).find(b"\n")
                    if end < 0:
                        raise Decline("line")
                    if op == 0x70 and not (view[start : start + end].tobytes().isdigit()
                                           and int(view[start : start + end].tobytes()) < limit):
                        raise Decline("memo index")  # PUT: a text index
                    if op in _TEXT_NUMBERS and not _TEXT_NUMBERS[op].fullmatch(view[start : start + end]):
                        # C reads '021' as octal, ' 1' and '0x1' too: readers differ there, so the
                        # reference decides (and says what it makes of it).
                        raise Decline("number written unusually")
                    start += end + 1
                pos = start
            else:  # LONG_BINPUT beyond the bound, EXT*, BYTEARRAY8, buffers, PROTO again, unknown
                raise Decline(f"opcode {op:#x}")
            if pos > size:
                raise Decline("truncated")
    except (struct.error, IndexError):
        raise Decline("truncated") from None


# -- guarded twins of the objects the C unpickler may touch --------------------------------------

def _refuse(self: Any, *args: Any) -> None:
    raise Decline(f"BUILD on a {type(self).__name__}")


def _twin(base: type, **methods: Any) -> type:
    """A subclass of `base` with the same layout (so objects can be re-classed both ways)."""
    namespace = {"__slots__": (), "__setstate__": _refuse, "__module__": base.__module__,
                 "__qualname__": base.__qualname__, **methods}
    return type(base.__name__, (base,), namespace)


# Guarded twin per type an emulation or a persistent_load may return; exact builtins need none
# (no __dict__: BUILD on them fails, which sends the pickle to the reference).
_TWINS: dict[type, type] = {
    base: _twin(base)
    for base in (TensorInfo, Storage, torch_globals.DtypeValue, torch_globals.DeviceValue, torch_globals.SizeValue,
                 torch_globals.LayoutValue, torch_globals.StorageClass, torch_globals.BrokenValue)}
_BASE_OF: dict[type, type] = {twin: base for base, twin in _TWINS.items()}


_PLAIN = frozenset({int, float, str, bytes, bool, type(None), tuple, list, dict, set, frozenset, complex})


class _OrderedDict(collections.OrderedDict[Any, Any]):
    """OrderedDict as the fast path builds it: BUILD of a dict state is ignored, like the reference."""

    __module__ = "collections"
    __qualname__ = "OrderedDict"

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise Decline("BUILD on an OrderedDict")


_OrderedDict.__name__ = "OrderedDict"

_MAX_DIMS = 64  # torch_globals.MAX_DIMS

_SIZED = (list, tuple, dict, set, frozenset, str, bytes, bytearray)
_SIZED_TYPES = frozenset(_SIZED)
_DENIED = frozenset({"builtins.bytearray", "builtins.slice"})


def _fast_ordered_dict(ref: GlobalRef, args: tuple[Any, ...]) -> _OrderedDict:
    """`torch_globals._ordered_dict`, building the guarded OrderedDict directly."""
    out = _OrderedDict()
    if args and isinstance(args[0], (list, tuple)):
        for item in args[0]:
            key, value = item
            out[key] = value
    return out


def _make_call_rebuild(generic: Emulator, storage_twin: Any, tensor_twin: Any, reclassed: list[Any],
                       guard: Callable[[Any], Any], charge: Callable[[tuple[Any, ...]], None],
                       charge_all: bool) -> Callable[..., Any]:
    """The `__call__` of `torch._utils._rebuild_tensor_v2` on the fast path: `call_self` and
    `torch_globals._rebuild_tensor_v2` in one frame for the common case (a sound view of a storage).

    The same TensorInfo as the generic emulation, with fewer steps: every check that could fail or
    mark the tensor broken sends the call to the generic emulation, which says why.
    """
    sizes = dtypes._DTYPES
    sized = _SIZED_TYPES
    shared: dict[tuple[int, ...], tuple[int, ...]] = {}  # equal shapes and strides share one tuple

    def call_rebuild(func: Any, *args: Any) -> Any:
        count = len(args)
        if charge_all or (count and type(args[0]) in sized):
            charge(args)
        if count == 6 or (count == 7 and not args[6]):
            storage: Any = args[0]
            offset, shape, stride = args[1], args[2], args[3]
            if (type(storage) is storage_twin and storage.broken is None and type(offset) is int and offset >= 0
                    and type(shape) is tuple and type(stride) is tuple and len(shape) == len(stride) <= _MAX_DIMS):
                last = offset
                for size, step in zip(shape, stride, strict=True):  # lengths checked above
                    if type(size) is not int or type(step) is not int or size <= 0 or step < 0:
                        break
                    last += (size - 1) * step
                else:
                    if storage.dtype in sizes and last < storage.numel:  # a known dtype, inside the storage
                        value = TensorInfo(storage.dtype, shared.setdefault(shape, shape),
                                           shared.setdefault(stride, stride), offset, storage, bool(args[4]))
                        value.__class__ = tensor_twin
                        reclassed.append(value)
                        return value
        value = generic(func, args)
        if type(value) is TensorInfo:
            value.__class__ = tensor_twin
            reclassed.append(value)
            return value
        return guard(value)

    return call_rebuild


class _Session:
    """One load: the globals seen, what its copies may still cost, the objects re-classed (to restore after).

    The callbacks the C unpickler runs for every tensor are closures (no attribute lookups).
    """

    def __init__(self, emulators: dict[str, Emulator], resolve_global: Callable[[GlobalRef], Any] | None,
                 persistent_load: Callable[[Any], Any] | None, budget: int, proto: int,
                 charge_all: bool) -> None:
        self.emulators = emulators
        self.resolve_global = resolve_global
        self.copied, self.budget = 0, budget
        self.proto = proto
        self.globals_seen: dict[str, None] = {}
        self.reclassed: list[Any] = []
        reclassed = self.reclassed
        emulate_of: dict[int, Emulator] = {}  # id of a GlobalRef -> its emulation (refs stay alive)
        self.emulate_of = emulate_of
        self.fast_emulators = dict(emulators)
        if emulators.get("collections.OrderedDict") is torch_globals._ordered_dict:
            self.fast_emulators["collections.OrderedDict"] = _fast_ordered_dict
        session = self
        plain = _PLAIN
        sized = _SIZED_TYPES
        tensor_twin = _TWINS[TensorInfo]

        def guard(value: Any) -> Any:
            kind = type(value)
            twin = twins.get(kind)
            if twin is not None:
                value.__class__ = twin
                reclassed.append(value)
                return value
            if kind in plain or kind in bases:
                return value
            return session.guard_other(value)

        def call_self(func: Any, *args: Any) -> Any:
            # As the reference charges a REDUCE; INST and OBJ (always charged there) set charge_all.
            if charge_all or (args and type(args[0]) in sized):
                session.charge(args)
            emulate = emulate_of.get(id(func))
            if emulate is not None:
                value = emulate(func, args)
                if type(value) is TensorInfo:  # the hot case, inlined
                    value.__class__ = tensor_twin
                    reclassed.append(value)
                    return value
                return guard(value)
            if type(func) is Ref:
                ref: Any = func  # a GlobalRef twin: module and name, nothing to call
                return guard(StubObject(f"{ref.module}.{ref.name}", args, {}))
            return guard(StubObject(f"{func.cls}(...)", args, {}))

        def setitem(stub: StubObject, key: Any, value: Any) -> None:
            stub.items[key] = value

        def append(stub: StubObject, value: Any) -> None:
            stub.list_items.append(value)

        def extend(stub: StubObject, values: Any) -> None:
            stub.list_items.extend(values)

        def setstate(stub: StubObject, state: Any) -> None:
            stub.state = state
            stub.has_state = True

        storage_base, storage_twin = Storage, _TWINS[Storage]

        def load_persistent(pid: Any) -> Any:
            if persistent_load is None:
                raise Decline("persistent id")
            value = persistent_load(pid)
            if type(value) is storage_base:  # the hot case (a storage seen again is a twin already)
                value.__class__ = storage_twin
                reclassed.append(value)
                return value
            return guard(value)

        Ref = _twin(GlobalRef, __call__=call_self)
        Stub = _twin(StubObject, __call__=call_self, __setitem__=setitem, append=append,
                     extend=extend, add=append, __setstate__=setstate)
        twins = {**_TWINS, GlobalRef: Ref, StubObject: Stub}
        bases = {**_BASE_OF, Ref: GlobalRef, Stub: StubObject, _OrderedDict: collections.OrderedDict}
        # Called once per tensor (torch's rebuild, and OrderedDict() for its backward hooks): their
        # GlobalRefs get twins of their own whose __call__ does call_self's work with no lookups.
        self.direct_classes: dict[str, type] = {}
        generic_rebuild = emulators.get("torch._utils._rebuild_tensor_v2")
        if generic_rebuild is torch_globals._rebuild_tensor_v2:
            call_rebuild = _make_call_rebuild(generic_rebuild, _TWINS[Storage], tensor_twin, reclassed, guard,
                                              session.charge, charge_all)
            self.direct_classes["torch._utils._rebuild_tensor_v2"] = _twin(GlobalRef, __call__=call_rebuild)
        if emulators.get("collections.OrderedDict") is torch_globals._ordered_dict:

            def call_ordered_dict(func: Any, *args: Any) -> Any:
                if charge_all or (args and type(args[0]) in sized):
                    session.charge(args)
                return _fast_ordered_dict(func, args) if args else _OrderedDict()

            self.direct_classes["collections.OrderedDict"] = _twin(GlobalRef, __call__=call_ordered_dict)
        for direct in self.direct_classes.values():
            bases[direct] = GlobalRef
        self.guard, self.persistent_load, self.bases = guard, load_persistent, bases

    def guard_other(self, value: Any) -> Any:
        """A value of a type without a twin: an OrderedDict is rebuilt guarded, anything else declines."""
        if type(value) is collections.OrderedDict:
            guarded = _OrderedDict()
            guarded.update(value)
            return guarded
        raise Decline(f"a {type(value).__name__} in the object graph")

    def charge(self, args: tuple[Any, ...]) -> None:
        """The reference's charge for copies (`SafeUnpickler._charge`): the same cost, within what is left."""
        cost = len(args)
        for a in args[:4]:
            if isinstance(a, _SIZED):
                cost += len(a)
        self.copied += cost
        if self.copied > self.budget:
            raise Decline("copies past the budget")

    def find_class(self, module: str, name: str) -> Any:
        """The reference's `_global`: a record (or a torch constant), never an import."""
        if self.proto < 3:
            if (module, name) in RENAMED_NAMES:
                module, name = RENAMED_NAMES[(module, name)]
            else:
                module = RENAMED_MODULES.get(module, module)
        dotted = f"{module}.{name}"
        if dotted in _DENIED or module == "numpy" or module.startswith("numpy."):
            raise Decline(dotted)
        self.globals_seen.setdefault(dotted, None)
        ref = GlobalRef(module, name)
        direct = self.direct_classes.get(dotted)
        if direct is not None:
            ref.__class__ = direct
            self.reclassed.append(ref)
            return ref
        emulate = self.fast_emulators.get(dotted)
        if emulate is None and self.resolve_global is not None:
            return self.guard(self.resolve_global(ref))
        ref = self.guard(ref)
        if emulate is not None:
            self.emulate_of[id(ref)] = emulate
        return ref

    def close(self) -> None:
        """Drop every reference: the per-load classes form a cycle that only the collector frees, and
        it must not keep the caller's objects (a zip's 100,000 directory entries) alive until then."""
        self.reclassed.clear()
        self.emulate_of.clear()
        self.__dict__.clear()

    def restore(self) -> None:
        """Give every re-classed object its own class back."""
        bases = self.bases
        for value in self.reclassed:
            kind = type(value)
            if kind in bases:
                value.__class__ = bases[kind]


class _Unpickler(pickle.Unpickler):
    """The C unpickler; `fast_unpickle` sets `find_class` and `persistent_load` of each instance."""


def fast_unpickle(
    data: bytes | memoryview,
    *,
    emulators: dict[str, Emulator] | None = None,
    persistent_load: Callable[[Any], Any] | None = None,
    resolve_global: Callable[[GlobalRef], Any] | None = None,
    pos: int = 0,
    budget: Budget | None = None,
) -> tuple[Any, list[str], int] | None:
    """What `pickle_reader.unpickle` returns for the pickle at `pos`, or None: then run the reference.

    Charged to `budget` as the reference charges it (a pickle begun, its bytes, the elements calls copy),
    once it succeeded; a load that would copy past what the budget has left declines (the reference then
    runs and says so)."""
    budget = budget if budget is not None else Budget.for_stored(len(data), "the pickle")
    try:
        found = scan(data, pos)
    except Decline:
        return None
    end = found.end
    view = memoryview(data)
    session = _Session(emulators or {}, resolve_global, persistent_load,
                       budget.remaining - PICKLE_COST - (end - pos), found.proto, found.instantiates)
    # A bytes object that is exactly the pickle is shared by BytesIO, not copied.
    whole = type(data) is bytes and pos == 0 and end == len(data)
    stream = io.BufferedReader(io.BytesIO(data if whole else view[pos:end]), 1 << 20)
    unpickler = _Unpickler(stream, fix_imports=False, encoding="latin1")
    # The restricting pattern of the pickle docs: the C Unpickler looks these up on the instance.
    unpickler.find_class = session.find_class  # type: ignore[method-assign]
    unpickler.persistent_load = session.persistent_load  # type: ignore[method-assign]
    try:
        with paused_gc():
            obj = unpickler.load()
            if stream.tell() != end - pos:
                return None
    except Exception:  # noqa: BLE001 - anything at all: the reference decides, with its own message
        return None
    finally:
        session.restore()
        globals_seen = list(session.globals_seen)
        copied = session.copied
        session.close()
    budget.charge(PICKLE_COST, "pickles begun")
    budget.charge(end - pos, "bytes of pickle read")
    budget.charge(copied, COPIED)
    return obj, globals_seen, end
