"""One open per checkpoint per window (issue 26.5): the comparison reuses the tabs' checkpoints, a series tab
opens each of its checkpoints once for its reading and its plots, and closing one holder never takes a tree
apart under another."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core.read import open as open_module
from ckptview.core.session.workspace import Workspace
from ckptview.gui.compare.tab import compare_open_tabs
from ckptview.gui.series.tab import SeriesTab
from tests.support.guihelpers import wait_settled


def count_opens(monkeypatch) -> list[str]:
    """Every file the readers open from now on (whoever asks: tab, comparison, run, plots)."""
    opened: list[str] = []
    real = open_module._open_with_readers  # noqa: SLF001 (the one step every open of a file takes)

    def counting(source, ctx):
        opened.append(source.path)
        return real(source, ctx)

    monkeypatch.setattr(open_module, "_open_with_readers", counting)
    return opened


@pytest.fixture
def pair(tmp_path):
    g = torch.Generator().manual_seed(0)
    a = {"enc.w": torch.randn(40, 30, generator=g), "head.w": torch.randn(10, 40, generator=g)}
    b = {k: v + 0.1 * torch.randn(v.shape, generator=g) for k, v in a.items()}
    torch.save(a, tmp_path / "a.pth")
    torch.save(b, tmp_path / "b.pth")
    return str(tmp_path / "a.pth"), str(tmp_path / "b.pth"), a, b


def test_comparing_two_open_tabs_opens_no_file_again(qtbot, window, pair, monkeypatch):
    a, b, sd_a, sd_b = pair
    tabs = window.open_paths([a, b])
    for tab in tabs:
        wait_settled(qtbot, tab)
    opened = count_opens(monkeypatch)
    view = compare_open_tabs(window)
    qtbot.waitUntil(lambda: view.result is not None and not view.busy, timeout=20_000)
    assert opened == []  # both files come from the tabs that show them
    tab_a, tab_b = tabs
    assert view.trees() == [tab_a.checkpoint, tab_b.checkpoint]
    assert view.result.summary() == {"changed": 2}

    # Closing tab A leaves the comparison's checkpoint whole: its tree is not taken apart with the tab's rows.
    rows = tab_a.top
    window.close_tab(window.tabs.indexOf(tab_a))
    qtbot.waitUntil(lambda: not rows.children, timeout=10_000)  # the tab's own rows were released
    checkpoint_a = view.trees()[0]
    assert len(checkpoint_a.root.children) == 2 and window.workspace.holders(a) == 1
    with qtbot.waitSignal(view.histograms_ready, timeout=20_000):
        view.table.selectRow(0)
    ta, tb = (sd["enc.w"].double().numpy().ravel() for sd in (sd_a, sd_b))
    lo, hi = min(ta.min(), tb.min()), max(ta.max(), tb.max())
    counts = view.overlay_counts()
    assert view.current_row().name == "enc.w"
    assert np.array_equal(counts["a"], np.histogram(ta, 100, (lo, hi))[0])
    assert opened == []

    # Closing the comparison lets A go (nobody holds it); B stays whole with its tab.
    window.close_tab(window.tabs.indexOf(view))
    qtbot.waitUntil(lambda: not checkpoint_a.root.children, timeout=10_000)
    assert window.workspace.holders(a) == 0 and window.workspace.holders(b) == 1
    assert len(tab_b.checkpoint.root.children) == 2


def save_run(folder) -> list[str]:
    folder.mkdir()
    g = torch.Generator().manual_seed(5)
    paths = []
    for step in (10, 20, 30):
        path = folder / f"step_{step}.pt"
        torch.save({"step": step, "layer.weight": torch.randn(24, 16, generator=g),
                    "layer.bias": torch.randn(24, generator=g)}, path)
        paths.append(str(path))
    return paths


def test_a_run_tab_opens_each_checkpoint_once_for_its_reading_and_its_plots(qtbot, tmp_path, monkeypatch):
    paths = save_run(tmp_path / "run")
    opened = count_opens(monkeypatch)
    workspace = Workspace()  # a window's, as open_series_tab would hand it
    tab = SeriesTab([str(tmp_path / "run")], workspace=workspace)
    try:
        tab.resize(1024, 640)
        tab.show()
        qtbot.waitExposed(tab)
        with qtbot.waitSignal(tab.finished, timeout=120_000):
            tab.start()
        assert tab.select_tensor("layer.weight")
        qtbot.waitUntil(lambda: tab.histograms.counts.shape == (64, 3), timeout=60_000)
        with qtbot.waitSignal(tab.spectra_ready, timeout=60_000):
            tab.spectral_box.setChecked(True)
        assert sorted(opened) == paths  # planning, reading, histograms and spectra: one open each
        weights = [torch.load(p, weights_only=True)["layer.weight"] for p in paths]
        assert [int(tab.histograms.counts[:, t].sum()) for t in range(3)] == [w.numel() for w in weights]
        assert all(workspace.holders(p) == 1 for p in paths)  # held by the run for its plots
    finally:
        tab.close()
        tab.deleteLater()  # the tab's holds go with it
    qtbot.waitUntil(lambda: all(workspace.holders(p) == 0 for p in paths), timeout=10_000)
