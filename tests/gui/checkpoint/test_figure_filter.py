"""The filter box finds tensors by a figure (issue 35, finding 10): `nan>0`, `norm>10`, `alpha<2`.

The figures are computed in a worker with progress in the match label and a Cancel button, never on the
GUI thread; what they find is also marked in the tree (the NaN colour), and the figures are kept, so the
next figure filter over them reads nothing again.
"""

from __future__ import annotations

import math
import threading

import pytest
import torch
from PySide6.QtCore import Qt

from tests.support.guihelpers import wait_settled


@pytest.fixture
def model_file(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    state = dict(model.state_dict())
    state["2.weight"] = state["2.weight"].clone()
    state["2.weight"][1, 1] = math.nan
    state["loud"] = torch.randn(300, 300) * 5
    path = tmp_path / "model.pt"
    torch.save({"model": state, "step": 4}, path)
    return path, state


def opened(qtbot, window, path):
    (tab,) = window.open_paths([str(path)])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    return tab


def matches(tab) -> set[str]:
    return {r.name for r in tab.top.walk() if r.node is not None and r.node.kind == "tensor"
            and tab.model.index_of(r).isValid()}


def test_a_figure_filter_finds_what_torch_finds(qtbot, window, model_file):
    from ckptview.gui.checkpoint.tree_model import NONFINITE_ROLE

    path, state = model_file
    tab = opened(qtbot, window, path)
    seen: list[str] = []
    tab.filter.figures.yielded.connect(lambda step: seen.append(tab.match_label.text()))
    with qtbot.waitSignal(tab.filter.applied, timeout=30_000):
        tab.filter.set_text("nan>0")
    assert matches(tab) == {"model.2.weight"} and tab.model.match_count == 1
    assert any("figures" in text and "%" in text for text in seen), seen
    assert "1 of" in tab.match_label.text()
    row = next(r for r in tab.top.walk() if r.name == "model.2.weight")  # the NaN found is marked
    qtbot.waitUntil(lambda: tab.model.data(tab.model.index_of(row), NONFINITE_ROLE) == (1, 0), timeout=20_000)
    passes = tab.context.analysis.passes
    with qtbot.waitSignal(tab.filter.applied, timeout=30_000):
        tab.filter.set_text("norm>10")
    expected = {f"model.{k}" for k, t in state.items() if float(torch.linalg.vector_norm(
        t[torch.isfinite(t)].double())) > 10}
    assert matches(tab) == expected and "model.loud" in expected
    assert tab.context.analysis.passes == passes  # the statistics were kept: nothing read again
    tab.filter_edit.setFocus()
    qtbot.keyClick(tab.filter_edit, Qt.Key.Key_Escape)
    assert not tab.model.filtered


def test_computing_the_figures_can_be_cancelled(qtbot, window, model_file, monkeypatch):
    import ckptview.core.read.values.reading as values

    path, _state = model_file
    tab = opened(qtbot, window, path)
    gate = threading.Event()
    real = values.iter_chunks

    def gated(info, chunk_elems=1 << 22, ahead=None):
        gate.wait(30)  # the worker waits here until the test has pressed Cancel
        yield from real(info, chunk_elems, ahead)

    monkeypatch.setattr(values, "iter_chunks", gated)
    applied: list[bool] = []
    tab.filter.applied.connect(lambda: applied.append(True))
    tab.filter.set_text("absmax>1")
    assert tab.filter.cancel_button.isVisible() and "computing" in tab.match_label.text()
    qtbot.mouseClick(tab.filter.cancel_button, Qt.MouseButton.LeftButton)
    gate.set()
    from PySide6.QtCore import QCoreApplication

    from ckptview.gui.base.workers import wait_for_workers

    assert wait_for_workers(30_000)
    QCoreApplication.sendPostedEvents()  # whatever the stopped job still queued arrives: it must be dropped
    QCoreApplication.processEvents()
    assert "cancelled" in tab.match_label.text() and not tab.filter.cancel_button.isVisible()
    assert applied == [] and not tab.model.filtered


def test_a_sort_term_orders_the_tree_by_a_figure(qtbot, window, model_file):
    """`sort:-norm` filters nothing and puts the tensor of the largest norm first, every module by its first
    tensor (torch's norms); the tooltip gives each figure; a click on a header sorts by its column instead,
    and a filter without the term returns to the file's order."""
    from ckptview.gui.checkpoint.tree_model import SIZE

    path, state = model_file
    tab = opened(qtbot, window, path)
    model = tab.model
    norms = {f"model.{k}": float(torch.linalg.vector_norm(t[torch.isfinite(t)].double())) for k, t in state.items()}

    def names(row):
        return [r.name for r in model.kids(row)]

    with qtbot.waitSignal(tab.filter.applied, timeout=30_000):
        tab.filter.set_text("sort:-norm")
    assert not model.filtered and model.figure_order is not None
    top_model = next(r for r in model.kids(tab.top) if r.name == "model")
    assert names(tab.top)[0] == "model"  # the tensors first; the step (a value, no figure) last
    under = names(top_model)
    assert under[0] == "model.loud"
    firsts = [max((n for n in norms if n.startswith(m + ".")), key=norms.get) if m not in norms else m for m in under]
    assert [norms[n] for n in firsts] == sorted((norms[n] for n in firsts), reverse=True)
    module = next(r for r in model.kids(top_model) if r.name == "model.2")
    assert names(module) == sorted(names(module), key=lambda n: -norms[n])
    tip = model.data(model.index_of(module), Qt.ItemDataRole.ToolTipRole)
    assert f"L2 norm {max(norms['model.2.weight'], norms['model.2.bias']):.6g} (the largest below)" in tip
    assert "by L2 norm, largest first" in tab.match_label.text()
    tab.tree.header().setSortIndicator(SIZE, Qt.SortOrder.DescendingOrder)  # a header click takes over
    assert model.figure_order is None and "by" not in tab.match_label.text()
    assert [r.nbytes for r in model.kids(top_model)] == sorted((r.nbytes for r in model.kids(top_model)),
                                                              reverse=True)
    tab.tree.header().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # the third click: the figure again
    assert names(top_model)[0] == "model.loud" and "by L2 norm" in tab.match_label.text()
    with qtbot.waitSignal(tab.filter.applied, timeout=30_000):
        tab.filter.set_text("nan>0 sort:nan")  # a filter and an order together
    assert model.filtered and model.match_count == 1 and "1 of" in tab.match_label.text()
    tab.filter.set_text("model")  # no sort term: the file's order
    assert model.figure_order is None and names(top_model) == [f"model.{m}" for m in ("0", "2", "loud")]
