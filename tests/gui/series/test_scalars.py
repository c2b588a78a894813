"""The series tab's Scalars view (issue 45): the loss and learning rate a run logged, drawn on the weight
figures' axis, equal to what the loop, Lightning and the HF Trainer logged; a chosen step marks its checkpoint
in every view; it fits 1024x640 and 1280x800 in both palettes. The comparison shows the values that differ."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtWidgets import QTableWidget

from ckptview.gui.base.plots import nothing_text
from ckptview.gui.compare.tab import CompareTab
from ckptview.gui.series.tab import SeriesTab
from tests.support import layout_checks as check
from tests.support.logged_runs import hf_trainer_run, lightning_run, plain_run
from tests.support.screens import rest


def drawn(plot) -> dict[tuple[float, ...], list[float]]:
    """The lines of a plot (not the checkpoint marks): their x -> y."""
    out = {}
    for item in plot.listDataItems():
        if item.opts.get("pen") is not None and item.opts["symbol"] != "d":
            x, y = item.getData()
            out[tuple(x)] = list(y)
    return out


def marks(plot) -> list[tuple[list[float], list[float]]]:
    return [tuple(map(list, item.getData())) for item in plot.listDataItems() if item.opts["symbol"] == "d"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return plain_run(str(tmp_path_factory.mktemp("scalars") / "run"))


def open_tab(qtbot, paths: list[str]) -> SeriesTab:
    tab = SeriesTab(paths)
    qtbot.addWidget(tab)
    with qtbot.waitSignal(tab.finished, timeout=120_000):
        tab.start()
    return tab


def test_the_loops_loss_and_lr_are_drawn_on_the_epoch_axis(qtbot, plain) -> None:
    tab = open_tab(qtbot, [plain.folder])
    assert tab.state == "ready" and tab.views.currentWidget() is tab.scalars
    epochs = tuple(float(e) for e in range(8))
    assert drawn(tab.scalars.metric_plot) == {epochs: [r["loss"] for r in plain.logged]}
    rates = drawn(tab.scalars.rate_plot)
    assert list(rates) == [epochs] and rates[epochs] == [r["lr"] for r in plain.logged]
    assert "loss" in tab.scalars.legend.text() and tab.scalars.metric_plot.getAxis("bottom").labelText == "epoch"
    # A click near epoch 4.3 chooses the checkpoint of epoch 4: marked here and in the Lines view.
    assert tab.scalars.choose_step(4.3) == 4 and tab.view.checkpoint == 4
    assert tab.lines.markers and tab.lines.markers[0].value() == 4.0 and tab.scalars.markers[0].value() == 4.0
    info = tab.scalars.info.text().replace("\u200b", "")
    assert "epoch 4: epoch_4.pt" in info and "lr 0.0015" in info


def test_a_run_with_nothing_logged_opens_on_its_lines(qtbot, tmp_path) -> None:
    import torch

    for step in (1, 2, 3):
        torch.save({"w": torch.full((4,), float(step))}, tmp_path / f"step_{step}.pt")
    tab = open_tab(qtbot, [str(tmp_path)])
    assert tab.views.currentWidget() is tab.lines and not tab.view.drawn()
    assert "logged no scalar" in nothing_text(tab.scalars.metric_plot)


def test_the_comparison_names_the_values_that_differ(qtbot, plain) -> None:
    view = CompareTab(plain.checkpoints[0], plain.checkpoints[7])
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.finished, timeout=60_000):
        view.start()
    text = view.values.label.text()
    assert view.values.isVisibleTo(view) and "<b>epoch</b> 0 \u2192 7" in text
    assert "optimizer_state_dict.param_groups.0.lr</b> 0.003 \u2192 0.00075" in text
    dialog = view.values.show_table()
    (table,) = [c for c in dialog.children() if isinstance(c, QTableWidget)]
    assert table.rowCount() == len(view.result.values) and table.item(0, 0).text() == view.result.values[0].name
    dialog.close()


# --- the three libraries' runs at both sizes and palettes ---------------------------------------------------

SIZES = [(1024, 640), (1280, 800)]
MIN_PLOT = {640: 60, 800: 100}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    pytest.importorskip("tensorboard")
    folder = tmp_path_factory.mktemp("libraries")
    return {"plain": plain_run(str(folder / "plain")), "lightning": lightning_run(str(folder / "pl")),
            "hf": hf_trainer_run(str(folder / "hf"))}


@pytest.mark.slow
@pytest.mark.parametrize("palette", ["light", "dark"])
def test_each_librarys_run_fits_and_reads(qtbot, settings, runs, palette) -> None:
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.palette import apply_palette

    settings.set_palette(palette)
    window = MainWindow(settings)
    qtbot.addWidget(window)
    found: list[str] = []
    try:
        for size in SIZES:
            window.resize(*size)
            window.show()
            qtbot.waitUntil(lambda size=size: (window.width(), window.height()) == size)
            for name, run in runs.items():
                tab = window.open_series([run.folder])
                qtbot.waitUntil(lambda tab=tab: tab.state != "loading", timeout=120_000)
                assert tab.state == "ready", tab.summary_label.text()
                assert tab.views.currentWidget() is tab.scalars, name
                qtbot.waitUntil(lambda tab=tab: not tab.reading.running, timeout=60_000)
                rest(lambda check, timeout: qtbot.waitUntil(check, timeout=timeout), window)  # layouts delivered
                where = f"{size[0]}x{size[1]}-{palette}/{name}"
                keys = {line.key for line in tab.view.drawn()}
                assert any("loss" in k for k in keys) and any("lr" in k or "learning_rate" in k for k in keys), keys
                assert drawn(tab.scalars.metric_plot) and drawn(tab.scalars.rate_plot), where
                if name != "plain":  # dense logged curves: their checkpoints marked on them
                    assert marks(tab.scalars.metric_plot), where
                found += check.label_problems(tab, where)
                found += check.plot_problems(tab, where, MIN_PLOT[size[1]])
                found += check.tab_problems(tab, where)
                found += check.contrast_problems(window, where)
                if (window.width(), window.height()) != size:
                    found.append(f"{where}: the window is {window.width()}x{window.height()}")
                window.close_tab(window.tabs.indexOf(tab))
    finally:
        window.close()
        apply_palette("system")
    assert not found, "\n".join(found)
    assert np.isfinite([e["loss"] for e in runs["hf"].logged if "loss" in e]).all()
