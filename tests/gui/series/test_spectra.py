"""The series tab's Spectral option (issue 28): alpha and stable rank of the selected weights over the steps, fitted
off the GUI thread, equal to ``spectrum()`` of each checkpoint's tensor opened alone."""

from __future__ import annotations

import math

import numpy as np

from ckptview.core import open_checkpoint
from ckptview.core.figures.spectral import spectrum
from ckptview.gui.series.tab import SeriesTab
from tests.core.series.test_spectra import STEPS, WEIGHT, save_run


def expected(paths: list[str], name: str) -> tuple[list[float], list[float]]:
    alphas, ranks = [], []
    for path in paths:
        ck = open_checkpoint(path)
        try:
            found = spectrum(next(e.info for e in ck.tensors() if e.name == name))
        finally:
            ck.close()
        alphas.append(found.alpha)
        ranks.append(found.stable_rank)
    return alphas, ranks


def test_spectral_lines_of_the_selected_weights(qtbot, tmp_path):
    paths = save_run(tmp_path / "run")
    tab = SeriesTab([str(tmp_path / "run")])
    qtbot.addWidget(tab)
    tab.resize(1024, 640)
    tab.show()
    qtbot.waitExposed(tab)
    with qtbot.waitSignal(tab.finished, timeout=120_000):
        tab.start()
    assert tab.views.indexOf(tab.spectra) == -1  # nothing fitted until asked

    # The module selects its 2-D weight, not its bias.
    tab.tree.clearSelection()
    tab._module_items["layers.7.mlp"].setSelected(True)
    with qtbot.waitSignal(tab.spectra_ready, timeout=120_000,
                          check_params_cb=lambda names: names == [WEIGHT]):
        qtbot.mouseClick(tab.spectral_box, _left())
    assert tab.views.currentWidget() is tab.spectra
    xs, alpha, rank = tab.spectra.line(WEIGHT)
    assert list(xs) == [float(s) for s in STEPS]
    want_alpha, want_rank = expected(paths, WEIGHT)
    assert list(alpha) == want_alpha
    assert list(rank) == want_rank
    assert alpha[2] > 2 > alpha[3]  # the crossing the finding of `series --spectral` reports at step 4000

    # Another weight added to the selection: both lines, the first not fitted again.
    fitted = dict(tab._spectra)
    with qtbot.waitSignal(tab.spectra_ready, timeout=120_000,
                          check_params_cb=lambda names: sorted(names) == sorted([WEIGHT, "conv.weight"])):
        tab._items["conv.weight"].setSelected(True)
    assert all(tab._spectra[key] == value for key, value in fitted.items())
    _, conv_alpha, conv_rank = tab.spectra.line("conv.weight")
    want_alpha, want_rank = expected(paths, "conv.weight")
    assert [None if math.isnan(a) else a for a in conv_alpha] == want_alpha
    assert list(conv_rank) == want_rank

    # A tensor that is not a matrix draws nothing; unchecking removes the view.
    tab.tree.clearSelection()
    with qtbot.waitSignal(tab.spectra_ready, timeout=60_000, check_params_cb=lambda names: names == []):
        tab._items["layers.7.mlp.bias"].setSelected(True)
    assert tab.spectra.series == {}

    # A checkpoint rewritten while followed: its figures are fitted again as it is now.
    import torch

    from tests.core.series.test_spectra import controlled

    state = torch.load(paths[3], weights_only=True)
    state[WEIGHT] = controlled(120, 80, 3.5, seed=9)
    torch.save(state, paths[3])
    tab.tree.clearSelection()
    tab._items[WEIGHT].setSelected(True)
    with qtbot.waitSignal(tab.spectra_ready, timeout=120_000, check_params_cb=lambda names: names == [WEIGHT]):
        tab.forget_spectra([paths[3]])
        tab.refresh()
    _, alpha, _ = tab.spectra.line(WEIGHT)
    assert alpha[3] == expected([paths[3]], WEIGHT)[0][0]
    assert 3 < alpha[3] < 4
    tab.spectral_box.setChecked(False)
    assert tab.views.indexOf(tab.spectra) == -1
    assert np.isfinite(want_rank).all()


def _left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton
