"""The Values panel survives tensors whose rows or columns Qt cannot count (issue 24, finding 21).

Qt counts rows, columns and header pixels in a C int: a tensor declared with 2**31 elements in one
dimension overflowed rowCount (SIGSEGV in endResetModel), and a [20000, 20000000] tensor overflowed the
header's pixel length (every section painted, the window stopped for minutes). The panel shows such a
tensor a page at a time, and says so in its status line.
"""

from __future__ import annotations

import struct

import pytest
from PySide6.QtCore import Qt

from tests.support.guihelpers import wait_settled

INT_MAX = 2**31 - 1


def declared(path, shape: list[int], dtype: str = "U8") -> str:
    """A ~100-byte safetensors file declaring one tensor of `shape` over 16 bytes (broken, but listed)."""
    header = b'{"w": {"dtype": "%s", "shape": %s, "data_offsets": [0, 16]}}' % (
        dtype.encode(), str(shape).replace(" ", "").encode())
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    return str(path)


def values_panel(qtbot, window, path: str):
    tab = window.open_paths([path])[0]
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    view = tab.show_panel("Values")
    with qtbot.waitSignal(view.sliceReady, timeout=20_000):
        assert tab.select_name("w")
    return tab, view


@pytest.mark.parametrize("shape", [[2**31 + 5], [2**31 + 5, 3], [3, 2**33]])
def test_more_than_int_max_rows_or_columns_are_paged(qtbot, window, tmp_path, shape):
    _tab, view = values_panel(qtbot, window, declared(tmp_path / "huge.safetensors", shape))
    model = view.model
    assert 0 < model.rowCount() <= INT_MAX and 0 < model.columnCount() <= INT_MAX
    for header in (view.table.horizontalHeader(), view.table.verticalHeader()):
        assert 0 < header.length() < INT_MAX  # pixels too
    assert "page" in view.status.text(), view.status.text()
    view.table.grab()  # paints: no overflow, no crash
    paged = 0 if model.rowCount() < model.view.shape[0] else 1
    button = view.next_page[paged]
    assert button.isVisible() and button.isEnabled()
    before = model.headerData(0, view.orientation(paged))
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    after = model.headerData(0, view.orientation(paged))
    assert before == "0" and int(after.replace(",", "")) > 0
    assert f"{int(after.replace(',', '')):,}" in view.status.text()


def test_twenty_million_columns_do_not_overflow_the_header(qtbot, window, tmp_path):
    _tab, view = values_panel(qtbot, window, declared(tmp_path / "wide.safetensors", [20000, 20000000], "F32"))
    header = view.table.horizontalHeader()
    assert 0 < header.length() < INT_MAX
    view.table.grab()
    assert "20,000,000" in view.status.text()


def test_a_leading_dimension_past_int_max_keeps_its_stepper(qtbot, window, tmp_path):
    _tab, view = values_panel(qtbot, window, declared(tmp_path / "deep.safetensors", [2**33, 2, 2]))
    assert (view.model.rowCount(), view.model.columnCount()) == (2, 2)
    (stepper,) = view.steppers
    assert stepper.maximum() == INT_MAX and "8,589,934,592" in stepper.toolTip()


def test_small_tensor_is_not_paged(qtbot, window, tmp_path):
    _tab, view = values_panel(qtbot, window, declared(tmp_path / "small.safetensors", [4, 4]))
    assert (view.model.rowCount(), view.model.columnCount()) == (4, 4)
    assert not any(b.isVisible() for b in view.next_page + view.prev_page)
    assert "page" not in view.status.text()
