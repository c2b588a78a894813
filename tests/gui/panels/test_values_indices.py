"""The Values panel numbers a slice's rows and columns by the tensor's own indices (issue 35, finding 6).

`[2000:2010, 4000:]` of a 2010 x 4096 tensor showed headers 0..9 and 0..95: a person reading row 3 could
not tell it was row 2003 of the tensor. The tensors are saved by torch; every cell is compared with the
same element of `torch.load`'s tensor, at the index its headers name.
"""

from __future__ import annotations

import pytest
import torch
from PySide6.QtCore import Qt

from ckptview.core import open_checkpoint

H, V = Qt.Orientation.Horizontal, Qt.Orientation.Vertical


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("values_indices") / "m.pt"
    big = (torch.arange(2010).reshape(-1, 1) * 7 + torch.arange(4096)) % 127  # a value tells its place
    torch.save({"big": big.to(torch.int8), "cube": torch.arange(2 * 9 * 10, dtype=torch.int32).reshape(2, 9, 10),
                "line": torch.arange(40, dtype=torch.int16)}, path)
    ck = open_checkpoint(str(path))
    yield ck, torch.load(path, weights_only=True)
    ck.close()


def show(qtbot, ck, name: str, spec: str):
    from ckptview.gui.panels.values import ValuesPanel

    view = ValuesPanel()
    view.resize(700, 400)
    qtbot.addWidget(view)
    view.show()
    with qtbot.waitSignal(view.sliceReady, timeout=10_000):
        view.set_tensor(ck.tensor(name), spec)
    assert view.model.view is not None, view.status.text()
    return view


def headers(view, orientation, count: int) -> list[str]:
    return [view.model.headerData(i, orientation) for i in range(count)]


def test_a_slice_is_numbered_by_the_tensors_own_indices(qtbot, saved):
    ck, ref = saved
    view = show(qtbot, ck, "big", "[2000:2010, 4000:]")
    model = view.model
    assert (model.rowCount(), model.columnCount()) == (10, 96)
    assert headers(view, V, 10) == [str(r) for r in range(2000, 2010)]
    assert headers(view, H, 96) == [str(c) for c in range(4000, 4096)]
    qtbot.waitUntil(lambda: model.cell_text(3, 3) is not None, timeout=10_000)
    view.table.scrollTo(model.index(9, 95))
    qtbot.waitUntil(lambda: model.cell_text(9, 95) is not None, timeout=10_000)
    for row, col in ((0, 0), (3, 3), (9, 95)):  # the cell under headers (r, c) holds tensor[r, c]
        r, c = int(model.headerData(row, V)), int(model.headerData(col, H))
        assert model.cell_text(row, col) == str(int(ref["big"][r, c]))


def test_steps_fixed_dimensions_and_one_dimensional_slices(qtbot, saved):
    ck, ref = saved
    view = show(qtbot, ck, "cube", "[1, 2:9:3, ::-4]")  # dim 0 fixed, a step, a reversed step
    assert headers(view, V, 3) == ["2", "5", "8"]
    assert headers(view, H, 3) == ["9", "5", "1"]
    qtbot.waitUntil(lambda: view.model.cell_text(2, 2) is not None, timeout=10_000)
    assert view.model.cell_text(2, 2) == str(int(ref["cube"][1, 8, 1]))
    tip = view.model.headerData(1, H, Qt.ItemDataRole.ToolTipRole)
    assert "dim 2" in tip and "5" in tip
    line = show(qtbot, ck, "line", "[30:]")
    assert headers(line, H, 10) == [str(i) for i in range(30, 40)]
    assert line.model.headerData(0, V) == ""  # the one row of a 1-D slice is no index of the tensor
