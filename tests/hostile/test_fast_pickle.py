"""The fast metadata path (restricted C unpickler) against the reference VM: same results, same limits.

Every hostile, malformed and reference corpus file is opened twice, once per path, and the two
checkpoints are compared (globals, unsafe globals, warnings, tensors, values, or the error message).
Then attacks aimed at the C unpickler itself: memo-index bombs, BUILD writing attributes of our
objects, deep nesting, every protocol.
"""

from __future__ import annotations

import collections
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ckptview.core.checkpoint import Storage, TensorInfo
from ckptview.core.errors import CheckpointError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.pickle import torch_tree as torch_pickle
from ckptview.core.read.pickle.fast import fast_unpickle, scan
from ckptview.core.read.pickle.torch_globals import EMULATORS, resolve_constant
from ckptview.core.read.pickle.vm import StubObject, unpickle
from tests.support import corpus


def _snapshot(path: Path) -> tuple:
    """Everything a reader reports about a file, as plain comparable data (or the error line)."""
    try:
        ckpt = open_checkpoint(str(path))
    except CheckpointError as exc:
        return ("error", type(exc).__name__, str(exc))
    try:
        tensors = [(e.name, e.info.dtype, e.info.shape, e.info.stride, e.info.offset, e.info.broken,
                    e.info.requires_grad, e.info.is_parameter, repr(e.info.extra),
                    None if e.info.storage is None else (e.info.storage.key, e.info.storage.numel))
                   for e in ckpt.tensors()]
        values = [(name, node.type_name, repr(node.value)[:500]) for name, _p, node in ckpt.value_entries()]
        return ("ok", ckpt.format, ckpt.globals, ckpt.unsafe_globals, ckpt.warnings, tensors, values)
    finally:
        ckpt.close()


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple, tuple]:
    monkeypatch.setattr(torch_pickle, "FAST_PATH", True)
    fast = _snapshot(path)
    monkeypatch.setattr(torch_pickle, "FAST_PATH", False)
    reference = _snapshot(path)
    monkeypatch.setattr(torch_pickle, "FAST_PATH", True)
    return fast, reference


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hostile", "malformed", "reference"])
def test_every_corpus_file_reads_the_same_on_both_paths(kind, tmp_path_factory, monkeypatch):
    cases = corpus.shared(kind, tmp_path_factory)
    paths = [c.path for c in cases] if kind != "reference" else list(cases.values())
    assert paths
    for path in paths:
        fast, reference = _both(path, monkeypatch)
        assert fast == reference, path.name
    if kind == "hostile":  # and nothing ran
        assert not [c.marker for c in cases if c.marker is not None and c.marker.exists()]


def _torch_files(folder: Path) -> list[Path]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    base = torch.arange(12.0)
    states = {
        "state_dict": model.state_dict(),
        "training": {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "lr": 1e-3,
                     "tags": {"a", "b"}, "shape": torch.Size([2, 3]), "device": torch.device("cpu"),
                     "dtype": torch.bfloat16, "nested": [(1, 2.5, None, True, b"x", "s")]},
        "views": {"base": base, "view": base[2:8].view(2, 3), "t": base.view(3, 4).t(),
                  "param": torch.nn.Parameter(torch.ones(2, 2)), "bf16": torch.zeros(3, dtype=torch.bfloat16),
                  "int8": torch.arange(5, dtype=torch.int8), "empty": torch.empty(0, 3)},
    }
    paths = []
    for name, state in states.items():
        for proto in (2, 4, 5):
            for legacy in (False, True):
                path = folder / f"{name}_p{proto}_{'legacy' if legacy else 'zip'}.pt"
                torch.save(state, path, pickle_protocol=proto, _use_new_zipfile_serialization=not legacy)
                paths.append(path)
    path = folder / "model.pt"  # a full model: NEWOBJ of stub classes, the reference reads it
    torch.save(model, path)
    paths.append(path)
    return paths


def test_torch_written_files_read_the_same_on_both_paths(tmp_path, monkeypatch):
    for path in _torch_files(tmp_path):
        fast, reference = _both(path, monkeypatch)
        assert fast == reference, path.name
        assert fast[0] == "ok", fast


def test_torch_state_dicts_take_the_fast_path(tmp_path, monkeypatch):
    import torch

    path = tmp_path / "sd.pt"
    sd = collections.OrderedDict((f"layer{i}.weight", torch.full((2, 3), float(i))) for i in range(50))
    sd._metadata = {"": {"version": 1}}
    torch.save(sd, path)
    calls = []
    real = torch_pickle.fast_unpickle

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(torch_pickle, "fast_unpickle", spy)
    ckpt = open_checkpoint(str(path))
    assert calls == [True]
    assert len(ckpt.tensors()) == 50
    assert type(ckpt.tensors()[0].info) is TensorInfo  # our objects got their own classes back
    assert type(ckpt.tensors()[0].info.storage) is Storage
    ckpt.close()
    # Values are those torch reads.
    from ckptview.core.read.values.reading import read_values

    ckpt = open_checkpoint(str(path))
    loaded = torch.load(path, weights_only=True)
    for entry in ckpt.tensors():
        assert (read_values(entry.info) == loaded[entry.name].numpy()).all()
    ckpt.close()


def _both_unpickle(data: bytes, persistent_load=None) -> tuple:
    fast = fast_unpickle(data, emulators=EMULATORS, persistent_load=persistent_load,
                         resolve_global=resolve_constant)
    try:
        ref = unpickle(data, emulators=EMULATORS, persistent_load=persistent_load,
                       resolve_global=resolve_constant)
    except CheckpointError as exc:
        ref = exc
    return fast, ref


@pytest.mark.parametrize("proto", range(6))
def test_every_protocol_matches_the_reference(proto):
    value = {"a": [1, 2.5, -(1 << 70), None, True, False, "text\u00e9", b"raw", (), (1,), (1, 2), (1, 2, 3)],
             "b": {"nested": {"x": [[]]}}, 3: frozenset({1, 2}), "s": {4, 5}, "c": 1 + 2j,
             "od": collections.OrderedDict(k=1)}
    data = pickle.dumps(value, protocol=proto)
    fast, (ref, ref_globals, ref_end) = _both_unpickle(data)
    assert fast is not None, proto  # plain data: the fast path vouches for it
    obj, globals_seen, end = fast
    assert repr(obj) == repr(ref) and globals_seen == ref_globals and end == ref_end == len(data)


@pytest.mark.parametrize("index", [1 << 24, (1 << 32) - 1])
def test_memo_index_bomb_is_never_handed_to_the_c_unpickler(index):
    # LONG_BINPUT 2**32-1 would make the C unpickler allocate and zero a 64 GiB memo from 9 bytes.
    data = b"\x80\x02N" + b"r" + struct.pack("<I", index) + b"."
    assert fast_unpickle(data) is None
    obj, _, _ = unpickle(data)  # the reference keeps a dict: nothing large
    assert obj is None
    text = b"(N" + b"p%d\n" % index + b"t."  # protocol 0 PUT with a text index
    assert fast_unpickle(text) is None


def test_memo_bound_is_the_pickles_own_length_not_the_files():
    # A tiny pickle followed by 64 MiB of other bytes (a legacy file's tensor data): the index bound
    # comes from the pickle, so 2**22 is refused although the file could justify it.
    pickle_bytes = b"\x80\x02N" + b"r" + struct.pack("<I", 1 << 22) + b"."
    data = pickle_bytes + bytes(64 << 20)
    assert fast_unpickle(data) is None
    assert scan(b"\x80\x02N" + b"r" + struct.pack("<I", 1000) + b"." + bytes(64 << 20)).end == 9


def test_memo_bomb_process_stays_small(tmp_path):
    """Opened as a file, in a fresh process: peak memory stays far below the memo it asks for."""
    path = tmp_path / "memo_bomb.pkl"
    path.write_bytes(b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s" + b"r" + struct.pack("<I", 1 << 27) + b".")
    script = ("import resource, sys\nfrom ckptview.core.read.open import open_checkpoint\n"
              "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "ckpt = open_checkpoint(sys.argv[1])\nprint(len(ckpt.root.children))\n"
              "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    children, grown_mb = map(int, out.stdout.split())
    assert children == 1 and grown_mb < 200  # a 2**27 memo would be 2 GiB


def test_scan_declines_what_honest_pickles_never_hold():
    for data in (b"\x80\x05\x96" + struct.pack("<Q", 2) + b"ab.",  # BYTEARRAY8
                 b"\x80\x05C\x02ab\x98.",  # READONLY_BUFFER: a memoryview in the tree
                 b"\x80\x05\x97.",  # NEXT_BUFFER
                 b"\x80\x02\x82\x01.",  # EXT1
                 b"\x80\x04N\x80\x02.",  # a second PROTO would change how names are mapped
                 b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"abc",  # a length past the end
                 b"\x80\x02N",  # no STOP
                 b"\x80\x02c__builtin__\nbytearray\n)R."):  # a bytearray would take APPEND/SETITEM
        assert fast_unpickle(data, emulators=EMULATORS, resolve_global=resolve_constant) is None, data


def test_build_cannot_write_attributes_of_our_objects():
    """BUILD on a TensorInfo/Storage/dtype: the C unpickler would set attributes; the fast path declines."""
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
              b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00K\x04\x85K\x01\x85\x89ccollections\n"
              b"OrderedDict\n)Rtq\x00R")
    storages = {}

    def load(pid):
        return storages.setdefault(pid[2], Storage(key=pid[2], dtype=pid[1].dtype, numel=pid[4]))

    attacks = [
        tensor + b"}X\x05\x00\x00\x00shapeK\x07\x85sb.",  # state dict: would set info.shape
        tensor + b"N}X\x05\x00\x00\x00shapeK\x07\x85s\x86b.",  # slot state: setattr
        tensor + b"N}X\t\x00\x00\x00__class__h\x00s\x86b.",
        b"\x80\x02ctorch\nfloat32\n}X\x05\x00\x00\x00splitK\x01sb.",  # a dtype constant
    ]
    for data in attacks:
        data = data if data.startswith(b"\x80") else b"\x80\x02" + data
        storages.clear()
        assert fast_unpickle(data, emulators=EMULATORS, persistent_load=load,
                             resolve_global=resolve_constant) is None
        with pytest.raises(CheckpointError, match="BUILD on"):
            unpickle(data, emulators=EMULATORS, persistent_load=load, resolve_global=resolve_constant)
    storages.clear()
    obj, _, _ = fast_unpickle(b"\x80\x02" + tensor + b".", emulators=EMULATORS, persistent_load=load,
                              resolve_global=resolve_constant)
    assert type(obj) is TensorInfo and obj.shape == (4,) and not obj.broken


def test_stub_objects_record_like_the_reference():
    """REDUCE/BUILD/APPENDS/SETITEMS/ADDITEMS on a stub only record, as in the reference VM."""
    body = (b"\x80\x04cos\nsystem\nX\x02\x00\x00\x00ls\x85R"  # os.system('ls'): a stub, nothing runs
            b"}X\x01\x00\x00\x00aK\x01sb"  # BUILD: recorded state
            b"(K\x01K\x02e"  # APPENDS
            b"X\x01\x00\x00\x00kK\x03s"  # SETITEM
            b"(K\x04\x90")  # ADDITEMS
    fast, (ref, ref_globals, _) = _both_unpickle(body + b".")
    assert fast is not None
    obj, globals_seen, _ = fast
    assert type(obj) is StubObject and vars(obj) == vars(ref)
    assert vars(obj) == {"cls": "os.system", "args": ("ls",), "kwargs": {}, "state": {"a": 1}, "items": {"k": 3},
                         "list_items": [1, 2, 4], "has_state": True}
    assert globals_seen == ref_globals == ["os.system"]
    fast, (ref, _, _) = _both_unpickle(body + b"K\x05\x85R.")  # calling the stub: another record
    assert fast is not None and type(fast[0]) is StubObject
    assert fast[0].cls == ref.cls == "os.system(...)" and fast[0].args == ref.args == (5,)


def test_copy_amplifier_is_refused_on_the_fast_path_too():
    # Protocol 4 names builtins.set directly: 20,000 copies of a 200,000-element list.
    data = (b"\x80\x04cbuiltins\nset\nq\x00]q\x01(" + b"K\x00" * 200_000 + b"e0]q\x02("
            + b"h\x00h\x01\x85R" * 20_000 + b"e.")
    assert fast_unpickle(data, emulators=EMULATORS, resolve_global=resolve_constant) is None
    with pytest.raises(CheckpointError, match="elements copied by calls"):
        unpickle(data, emulators=EMULATORS, resolve_global=resolve_constant)


def test_billion_laughs_is_refused_by_the_tree_on_the_fast_path(tmp_path, monkeypatch):
    laughs: object = [1] * 10
    for _ in range(9):
        laughs = [laughs] * 10
    path = tmp_path / "laughs.pkl"
    path.write_bytes(pickle.dumps(laughs, protocol=4))
    data = path.read_bytes()
    assert fast_unpickle(data) is not None  # shared, not expanded: 100 small lists
    fast, reference = _both(path, monkeypatch)
    assert fast == reference and fast[0] == "error" and "repeating shared" in fast[2]


@pytest.mark.parametrize("opening,closing", [(b"]", b"a"), (b"(", b"t"), (b"}K\x01", b"s")])
def test_100k_deep_nesting_on_both_paths(opening, closing, tmp_path, monkeypatch):
    n = 100_000
    if opening == b"(":
        data = b"\x80\x02" + b"(" * n + b"K\x01" + b"t" * n + b"."
    elif opening == b"]":
        data = b"\x80\x02" + b"]" * n + b"K\x01a" + b"a" * (n - 1) + b"."
    else:
        data = b"\x80\x02" + b"}K\x01" * n + b"K\x02" + b"s" * n + b"."
    assert scan(data).end == len(data)
    path = tmp_path / "deep.pkl"
    path.write_bytes(data)
    fast, reference = _both(path, monkeypatch)
    assert fast == reference


def test_legacy_stream_positions_match(tmp_path):
    import torch

    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(3)}, path, _use_new_zipfile_serialization=False)
    data = path.read_bytes()
    pos = 0
    for _ in range(3):  # magic number, protocol version, sys_info
        _, _, pos = unpickle(data, pos=pos)
    storages = {}

    def load(pid):
        return storages.setdefault(pid[2], Storage(key=pid[2], dtype=pid[1].dtype, numel=pid[4]))

    fast = fast_unpickle(data, emulators=EMULATORS, persistent_load=load, resolve_global=resolve_constant,
                         pos=pos)
    ref = unpickle(data, emulators=EMULATORS, persistent_load=load, resolve_global=resolve_constant, pos=pos)
    assert fast is not None and fast[2] == ref[2] and fast[1] == ref[1]
    assert repr(fast[0]["w"].shape) == repr(ref[0]["w"].shape)


@pytest.mark.parametrize("data", [
    b"\x80\x02]K\x01aK\x00K\x07s.",  # SETITEM on a list, by index
    b"\x80\x02]K\x01aK\x05K\x07s.",  # ... out of range
    b"\x80\x02]K\x01aX\x01\x00\x00\x00aK\x07s.",  # ... with a str index
    b"\x80\x02K\x01Nb.",  # BUILD of no state on an int
    b"\x80\x02]NN\x86b.",  # ... (None, None) on a list
    b"\x80\x02]N}\x86b.",  # ... (None, {}) on a list
    b"\x80\x02]N}X\x01\x00\x00\x00aK\x01s\x86b.",  # slot state on a list: refused
    b"\x80\x02}}X\x01\x00\x00\x00aK\x01sb.",  # dict state on a dict
    b"\x80\x02](K\x01K\x02\x90.",  # ADDITEMS on a list
    b"\x80\x02\x8f(K\x01K\x02e.",  # APPENDS on a set
])
def test_odd_opcode_targets_read_the_same_on_both_paths(data, tmp_path, monkeypatch):
    path = tmp_path / "odd.pkl"
    path.write_bytes(data)
    fast, reference = _both(path, monkeypatch)
    assert fast == reference


def test_the_tensor_rebuild_kept_as_a_value_reads_the_same_and_gets_its_class_back(tmp_path, monkeypatch):
    """The rebuild function has a twin of its own on the fast path: kept as a value (not called), or
    called on something that is not a storage, it must read as on the reference and come back a GlobalRef."""
    import torch
    from torch import _utils

    path = tmp_path / "refs.pt"
    torch.save({"fn": _utils._rebuild_tensor_v2, "again": [_utils._rebuild_tensor_v2], "t": torch.ones(2, 3)}, path)
    fast, reference = _both(path, monkeypatch)
    assert fast == reference and fast[0] == "ok"
    raw = pickle.dumps({"fn": _utils._rebuild_tensor_v2, "od": collections.OrderedDict()}, protocol=2)
    got = fast_unpickle(raw, emulators=EMULATORS, resolve_global=resolve_constant)
    want = unpickle(raw, emulators=EMULATORS, resolve_global=resolve_constant)
    assert got is not None and _describe(got[0]) == _describe(want[0]) and got[1] == want[1]
    assert type(got[0]["fn"]).__name__ == "GlobalRef" and type(got[0]["fn"]) is type(want[0]["fn"])
    odd = pickle.dumps(_Reduce(_utils._rebuild_tensor_v2, ("not a storage", 0, (2,), (1,), False, None)),
                       protocol=2)
    with pytest.raises(CheckpointError, match="not a storage"):
        unpickle(odd, emulators=EMULATORS, resolve_global=resolve_constant)
    assert fast_unpickle(odd, emulators=EMULATORS, resolve_global=resolve_constant) is None  # the reference says why


class _Reduce:
    """Pickles as a call of `func` on `args` (what a crafted file would hold)."""

    def __init__(self, func, args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _describe(obj, budget=2000):
    """A bounded, comparable description of an unpickled graph (types, plain values, records)."""
    out, stack, seen = [], [obj], 0
    while stack and seen < budget:
        value = stack.pop()
        seen += 1
        kind = type(value).__name__
        if isinstance(value, (dict,)):
            out.append((kind, len(value)))
            for k, v in list(value.items())[:50]:
                stack.extend([k, v])
        elif isinstance(value, (list, tuple, set, frozenset)):
            out.append((kind, len(value)))
            stack.extend(list(value)[:50] if not isinstance(value, (set, frozenset)) else sorted(map(repr, value))[:50])
        elif isinstance(value, StubObject):
            out.append((kind, value.cls, value.has_state))
            stack.extend([value.args, value.kwargs, value.state, value.items, value.list_items])
        elif isinstance(value, TensorInfo):
            out.append((kind, value.dtype, value.shape, value.stride, value.offset, value.broken,
                        value.requires_grad, value.is_parameter, repr(value.extra)[:200],
                        None if value.storage is None else (value.storage.key, value.storage.numel)))
        else:
            out.append((kind, repr(value)[:200]))
    return out


def test_mutated_pickles_agree_with_the_reference_whenever_the_fast_path_answers(tmp_path):
    """Differential fuzz: byte mutations of torch and plain pickles; the fast path either declines or
    gives what the reference gives (same globals, same object graph)."""
    import random

    import torch

    sd = {"w": torch.arange(6.0).view(2, 3), "b": torch.ones(3, dtype=torch.bfloat16), "step": 3,
          "nested": {"lr": 1e-3, "betas": (0.9, 0.99), "names": ["a", "b"], "flag": True}}
    path = tmp_path / "sd.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=False)
    raw = path.read_bytes()
    pos = 0
    for _ in range(3):
        _, _, pos = unpickle(raw, pos=pos)
    _, _, end = unpickle(raw, emulators=EMULATORS, resolve_global=resolve_constant,
                         persistent_load=lambda pid: Storage(key=str(pid[2]), dtype=pid[1].dtype, numel=pid[4]),
                         pos=pos)
    plain = {"a": [1, 2.5, "x", (None, True), -7, 1 << 70], "s": {1, 2}, "b": b"yz", "fs": frozenset({3}),
             "od": collections.OrderedDict(k=[1]), "c": 1 + 2j, "t": (("u",), {"v": []})}
    seeds = [raw[pos:end]] + [pickle.dumps(plain, protocol=p) for p in range(6)]
    # Opcodes inserted whole: BUILD, SETITEM(S), APPEND(S), ADDITEMS on whatever is on the stack.
    inserts = [b"b", b"s", b"a", b"(u", b"(e", b"(\x90", b"N", b"0", b"2", b")", b"}", b"]", b"\x8f", b"R",
               b"\x85", b"(", b"t", b"NNb", b"N}\x86b", b"K\x00K\x01s", b"I021\n", b"I 1\n", b"F2.5\x00\n"]
    rng = random.Random(18)
    answered = 0
    for i in range(2000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            where = rng.randrange(len(data))
            action = rng.random()
            if action < 0.5:
                data[where] = rng.randrange(256)
            elif action < 0.7:
                del data[where]
            elif action < 0.85:
                data.insert(where, rng.randrange(256))
            else:
                data[where:where] = rng.choice(inserts)
        data = bytes(data)
        storages = {}

        def load(pid, storages=storages):
            if not isinstance(pid, tuple) or len(pid) < 5 or not isinstance(pid[4], int):
                raise CheckpointError("bad pid")
            return storages.setdefault(str(pid[2]), Storage(key=str(pid[2]), dtype=getattr(pid[1], "dtype", "uint8"),
                                                            numel=pid[4]))

        fast = fast_unpickle(data, emulators=EMULATORS, persistent_load=load, resolve_global=resolve_constant)
        if fast is None:
            continue
        answered += 1
        storages.clear()
        ref = unpickle(data, emulators=EMULATORS, persistent_load=load, resolve_global=resolve_constant)
        assert fast[1] == ref[1] and fast[2] == ref[2], i
        assert _describe(fast[0]) == _describe(ref[0]), i
    assert answered > 100  # most single-byte changes inside strings and numbers still read


def test_100k_deep_chain_of_calls_on_both_paths(tmp_path, monkeypatch):
    """os.system(os.system(...)) 100,000 deep: records only, built and freed without recursion."""
    n = 100_000
    data = b"\x80\x02cos\nsystem\nq\x00" + b"0" + b"h\x00(" * n + b"N" + b"tR" * n + b"."
    fast = fast_unpickle(data, emulators=EMULATORS, resolve_global=resolve_constant)
    assert fast is not None and type(fast[0]) is StubObject and fast[1] == ["os.system"]
    del fast
    path = tmp_path / "calls.pkl"
    path.write_bytes(data)
    fast, reference = _both(path, monkeypatch)
    assert fast == reference and fast[0] == "ok" and fast[3] == ["os.system"]
