"""The window lists a Trainer folder at metadata cost: its tree shows at once, the optimizer's names marked
guessed, while the model's parameter order is learned in the background; then the names fill in, for sure."""

from __future__ import annotations

import threading

import pytest

from ckptview.core.inspect import hf_order
from ckptview.core.inspect.order_cache import ParamOrderCache
from tests.support.guihelpers import wait_settled
from tests.support.trainer_folders import write_bert_trainer


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trainer") / "checkpoint-2"
    return folder, write_bert_trainer(folder)


def test_the_tree_shows_first_and_the_names_fill_in(qtbot, window, trainer, tmp_path, monkeypatch):
    folder, truth = trainer
    window.workspace.orders = ParamOrderCache(str(tmp_path / "orders.sqlite3"))  # nothing learned yet
    building, let_go = threading.Event(), threading.Event()
    real = hf_order._build

    def held_build(*args):  # the library's build waits until the test has seen the tree
        building.set()
        let_go.wait(120)
        return real(*args)

    monkeypatch.setattr(hf_order, "_build", held_build)
    (tab,) = window.open_paths([str(folder)])
    try:
        wait_settled(qtbot, tab, timeout=60_000)  # ready while the build is still held
        assert tab.state == "ready", tab.error_text
        qtbot.waitUntil(building.is_set, timeout=60_000)
        assert tab.order_learner.running
        panel = tab.side_panels.show_panel("Optimizer")
        names = [panel.row_texts(r)["name"] for r in range(panel.params_table.rowCount())]
        assert any(n.endswith("(guessed)") for n in names)  # marked until the order arrives
        with qtbot.waitSignal(tab.order_learner.arrived, timeout=300_000):
            let_go.set()
        names = [panel.row_texts(r)["name"] for r in range(panel.params_table.rowCount())]
        assert names == truth  # every name sure, in the optimizer's order
        labels = [row.label for row in tab.top.walk() if row.label and " · " in row.label]  # "0 · encoder.0.weight"
        assert labels and not any(label.endswith("(guessed)") for label in labels)
    finally:
        let_go.set()
