"""The safe pickle VM: every protocol, inert stubs for unknown globals, and nothing ever runs."""

from __future__ import annotations

import collections
import os
import pickle

import pytest

from ckptview.core.budget import Budget
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.pickle.to_tree import build_tree
from ckptview.core.read.pickle.vm import StubObject, unpickle


class Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Namespace:
    def __init__(self) -> None:
        self.lr = 0.1
        self.name = "run"


@pytest.mark.parametrize("protocol", range(6))
def test_plain_values_round_trip_every_protocol(protocol):
    obj = {"a": [1, -2, 2.5, "x", "ü", None, True, False, (1, 2, 3), 10**30, -(10**30), 300, 70000],
           "b": b"bytes", "t": (), "nested": {"d": [[[]]]}}
    result, globals_seen, _ = unpickle(pickle.dumps(obj, protocol=protocol))
    if protocol >= 3:
        assert result == obj
    else:  # bytes in protocols 0-2 go through _codecs.encode, kept as a stub without emulators
        assert result["a"] == obj["a"] and result["nested"] == obj["nested"]


@pytest.mark.parametrize("protocol", range(6))
def test_payload_never_runs_and_is_recorded(tmp_path, protocol):
    marker = tmp_path / "pwned"
    data = pickle.dumps({"weights": [1, 2], "evil": Payload(str(marker))}, protocol=protocol)
    result, globals_seen, _ = unpickle(data)
    assert not marker.exists()
    assert any(g in ("posix.system", "os.system", "nt.system") for g in globals_seen)
    stub = result["evil"]
    assert isinstance(stub, StubObject) and stub.args == (f"touch {marker}",)


@pytest.mark.parametrize("protocol", range(6))
def test_unknown_class_instance_becomes_stub_with_state(protocol):
    from ckptview.core.read.pickle.torch_globals import EMULATORS, resolve_constant

    result, globals_seen, _ = unpickle(pickle.dumps({"args": Namespace()}, protocol=protocol),
                                       emulators=EMULATORS, resolve_global=resolve_constant)
    stub = result["args"]
    assert isinstance(stub, StubObject)
    assert stub.cls.endswith("Namespace")
    state = stub.state if isinstance(stub.state, dict) else stub.state[0]
    assert state == {"lr": 0.1, "name": "run"}
    tree = build_tree(result, Budget.for_stored(0, "x"))
    assert [n.name for n in tree.walk() if n.kind == "value"] == ["args.lr", "args.name"]


def test_ordered_dict_is_built_by_emulation():
    from ckptview.core.read.pickle.torch_globals import EMULATORS, resolve_constant

    data = pickle.dumps(collections.OrderedDict([("x", 1), ("y", 2)]), protocol=2)
    result, globals_seen, _ = unpickle(data, emulators=EMULATORS, resolve_global=resolve_constant)
    assert isinstance(result, collections.OrderedDict) and list(result.items()) == [("x", 1), ("y", 2)]
    assert globals_seen == ["collections.OrderedDict"]


@pytest.mark.parametrize("data, message", [
    (b"", "truncated"),
    (b"\x80\x02", "truncated"),
    (b"\x80\x02.", "stack underflow"),
    (b"\x80\x02h\x05.", "memo key 5"),
    (b"\x80\x02X\xff\xff\xff\x7f", "truncated"),
    (b"\x80\x09N.", "protocol 9"),
    (b"\xff", "unknown opcode"),
    (b"\x80\x02Ne.", "MARK"),
    (b"\x80\x02]K\x01s.", "stack underflow"),
    (b"\x80\x02}(K\x01u.", "odd number"),
])
def test_malformed_pickles_raise_one_error_type(data, message):
    with pytest.raises(CheckpointFormatError, match=message):
        unpickle(data)


def test_deep_nesting_and_cycles_are_bounded():
    depth = 100_000
    data = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    result, _, _ = unpickle(data)
    tree = build_tree(result, Budget.for_stored(0, "x"))
    assert 1000 <= sum(1 for _ in tree.walk()) <= depth  # deep nesting is cut, not a crash
    cyclic = []
    cyclic.append(cyclic)
    tree = build_tree(unpickle(pickle.dumps(cyclic, protocol=2))[0], Budget.for_stored(0, "x"))
    assert tree.children[0].kind == "value" and "cycle" in repr(tree.children[0].value)


def test_exponential_sharing_is_refused():
    # Each level is a list holding the previous level twice: 2**40 leaves if expanded naively.
    data = bytearray(b"\x80\x02K\x01q\x00")
    for level in range(40):
        data += b"h" + bytes([level % 256]) + b"h" + bytes([level % 256]) + b"\x86q" + bytes([(level + 1) % 256])
    data += b"."
    obj = unpickle(bytes(data))[0]
    with pytest.raises(CheckpointFormatError, match="more than"):
        build_tree(obj, Budget.for_stored(len(data), "the pickle"))
