"""The optional abilities of byte sources are declared protocols, and each source of the byte layer
provides exactly the ones the value reads rely on (`core/read/values/capabilities.py`)."""

from __future__ import annotations

import ast

import pytest

from ckptview.core.read.bytes.sources import FileSlice, MemorySource, ZipMember
from ckptview.core.read.values import capabilities as caps
from ckptview.core.read.values.assembled import AssembledSource
from tests.support.paths import SRC

GUARDS = {"file span": caps.has_file_span, "range read": caps.has_range_read, "inflate": caps.has_inflate,
          "logical chunks": caps.has_logical_chunks}


class Plain:
    """A byte source with nothing beyond `ByteSource`: read whole through `open_buffer`."""

    def describe(self) -> str:
        return "plain"

    def open_buffer(self) -> memoryview:
        return memoryview(b"")


@pytest.mark.parametrize(("kind", "expected"), [
    (FileSlice, {"file span", "range read"}),
    (ZipMember, {"file span", "range read", "inflate"}),
    (MemorySource, {"range read"}),
    (AssembledSource, {"logical chunks"}),
    (Plain, set()),
])
def test_each_source_provides_what_it_declares(kind, expected):
    source = kind.__new__(kind)  # abilities belong to the class: no file needs opening
    assert {name for name, has in GUARDS.items() if has(source)} == expected
    for name, protocol in (("file span", caps.SupportsFileSpan), ("range read", caps.SupportsRangeRead),
                           ("inflate", caps.SupportsInflate), ("logical chunks", caps.SupportsLogicalChunks)):
        assert isinstance(source, protocol) == (name in expected)  # the guard agrees with the protocol


def test_value_reads_ask_by_protocol_never_by_attribute_name():
    """A `getattr(source, "file_span", None)` is an interface nobody declared: reading.py asks the guards."""
    offenders = []
    for path in (SRC / "core" / "read" / "values").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
