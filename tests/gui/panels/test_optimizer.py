"""Optimizer panel and training panel read with qtbot on a Lightning-layout checkpoint trained with torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from ckptview.core import open_checkpoint  # noqa: E402
from ckptview.gui.panels.optimizer import OptimizerPanel  # noqa: E402
from ckptview.gui.panels.training import TrainingPanel  # noqa: E402


@pytest.fixture
def trained(tmp_path):
    """Adam over two groups with a frozen bias, a BatchNorm, a scheduler; saved the way Lightning does."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 2))
    net[0].bias.requires_grad_(False)
    named = list(net.named_parameters())
    opt = torch.optim.Adam([{"params": [p for _, p in named[:4]], "lr": 1e-3},
                            {"params": [p for _, p in named[4:]], "lr": 1e-2}], eps=1e-6)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(8, 5)).pow(2).mean().backward()
        opt.step()
        sched.step()
    obj = {
        "epoch": 3, "global_step": 3, "loss": torch.tensor(0.75), "pytorch-lightning_version": "2.4.0",
        "state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
        "optimizer_states": [opt.state_dict()], "lr_schedulers": [sched.state_dict()],
        "hyper_parameters": {"hidden": 6, "dropout": 0.1},
    }
    path = tmp_path / "epoch=3.ckpt"
    torch.save(obj, path)
    ck = open_checkpoint(str(path))
    yield ck, opt, sched, [f"model.{n}" for n, _ in named]
    ck.close()


def test_panel_maps_parameters_and_shows_figures(qtbot, trained) -> None:
    ck, opt, _, names = trained
    panel = OptimizerPanel(checkpoint=ck)
    qtbot.addWidget(panel)
    assert not panel.chooser.isVisible()
    assert "adam-like" in panel.summary.text() and "exact" in panel.summary.text()
    lrs = [f"{g['lr']:.4g}" for g in opt.param_groups]  # halved once by the scheduler
    assert [panel.group_texts(0)["lr"], panel.group_texts(1)["lr"]] == lrs == ["0.0005", "0.005"]
    assert panel.group_texts(0)["params"] == "4" and panel.group_texts(1)["eps"] == "1e-06"
    with qtbot.waitSignal(panel.figuresReady, timeout=10_000):
        panel.show()  # the figures start when the panel is seen
    sd = opt.state_dict()
    assert [panel.row_texts(r)["name"] for r in range(len(names))] == names
    frozen = panel.row_texts(1)
    assert frozen["name"] == "model.0.bias" and frozen["step"] == "no state" and frozen["‖exp_avg‖"] == ""
    for r, pid in enumerate(i for g in sd["param_groups"] for i in g["params"]):
        state = sd["state"].get(pid)
        if state is None:
            continue
        row = panel.row_texts(r)
        assert row["step"] == "3"
        assert row["‖exp_avg‖"] == f"{torch.linalg.vector_norm(state['exp_avg'].double()).item():.4g}"
        group = sd["param_groups"][0 if r < 4 else 1]
        v_hat = state["exp_avg_sq"].double() / (1 - group["betas"][1] ** 3)
        eff = (group["lr"] / (v_hat.sqrt() + group["eps"])).reshape(-1).numpy()
        assert row["eff. step max"] == f"{eff.max():.4g}"
        assert row["eff. step median"] == f"{np.median(eff):.4g}"


def test_clicking_a_row_shows_the_state_histogram(qtbot, trained) -> None:
    ck, opt, _, names = trained
    panel = OptimizerPanel(checkpoint=ck)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.figuresReady, timeout=10_000):
        panel.show()
    panel.state_choice.setCurrentText("exp_avg_sq")
    row = names.index("model.3.weight")
    rect = panel.params_table.visualRect(panel.params_table.model().index(row, 0))
    with qtbot.waitSignal(panel.histogram.exactReady, timeout=10_000):
        qtbot.mouseClick(panel.params_table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert panel.selected_param().name == "model.3.weight"
    pid = opt.state_dict()["param_groups"][1]["params"][-2]  # 3.weight is the second-to-last parameter
    x = opt.state_dict()["state"][pid]["exp_avg_sq"].double().reshape(-1).numpy()
    bins = panel.histogram.bins.value()
    (counts,) = panel.histogram.plotted_counts()
    assert np.array_equal(counts, np.histogram(x, bins, (x.min(), x.max()))[0])


def test_tree_selection_selects_the_row(qtbot, trained) -> None:
    ck, _, _, names = trained
    panel = OptimizerPanel(checkpoint=ck)
    qtbot.addWidget(panel)
    node = next(n for n in ck.root.walk() if n.name == "optimizer_states.0.state.2.exp_avg")
    panel.set_selection([node])
    assert panel.selected_param().name == names[2]
    param = next(n for n in ck.root.walk() if n.name == "state_dict.model.3.bias")
    panel.set_selection([param])
    assert panel.selected_param().name == "model.3.bias"


def test_training_panel(qtbot, trained) -> None:
    ck, _, sched, _ = trained
    card = TrainingPanel(checkpoint=ck)
    qtbot.addWidget(card)
    assert card.facts()["loss"].startswith("tensor")  # not read until the card is seen
    with qtbot.waitSignal(card.summaryReady, timeout=10_000):
        card.show()
    facts = card.facts()
    assert list(facts)[:3] == ["epoch", "global_step", "loss"]
    assert facts["epoch"] == "3" and facts["loss"] == "0.75"
    sched_rows = {row[2]: row[3] for row in card.section_rows("Schedulers")}
    assert card.section_rows("Schedulers")[0][:2] == ["lr_schedulers.0", "StepLR"]
    assert sched_rows["last_lr"] == "[" + ", ".join(f"{v:.6g}" for v in sched.get_last_lr()) + "]"
    assert sched_rows["step_size"] == "2" and sched_rows["last_epoch"] == "3"
    assert card.section_rows("Hyper-parameters") == [["hidden", "6"], ["dropout", "0.1"]]
    assert card.section_rows("Versions") == [["pytorch-lightning_version", "2.4.0"]]
    (opt_row,) = card.section_rows("Optimizers")
    assert opt_row == ["optimizer_states.0", "adam-like", "2", "0.0005, 0.005", "5 of 6 with state", "exact"]


def test_plain_state_dict_says_so(qtbot, tmp_path) -> None:
    path = tmp_path / "w.pt"
    torch.save({"w": torch.zeros(3)}, path)
    ck = open_checkpoint(str(path))
    panel, card = OptimizerPanel(checkpoint=ck), TrainingPanel(checkpoint=ck)
    qtbot.addWidget(panel)
    qtbot.addWidget(card)
    assert panel.optimizers == [] and card.tables == {}
    ck.close()


def test_panels_are_listed() -> None:
    from ckptview.gui.app.main_window import PANELS

    titles = [p.title for p in PANELS]
    assert "Optimizer" in titles and "Training" in titles


def test_in_the_window(qtbot, window, trained) -> None:
    """Opened from the window: both tabs exist; a tree click on optimizer state selects the parameter row."""
    from tests.support.guihelpers import wait_settled

    ck, _, _, names = trained
    (tab,) = window.open_paths([ck.path])
    wait_settled(qtbot, tab)
    panel = tab.panel("Optimizer")
    card = tab.panel("Training")
    assert isinstance(panel, OptimizerPanel) and isinstance(card, TrainingPanel)
    with qtbot.waitSignal(panel.figuresReady, timeout=10_000):
        tab.show_panel("Optimizer")
    assert tab.select_name("optimizer_states.0.state.3.exp_avg_sq")
    assert panel.selected_param().name == names[3]
    with qtbot.waitSignal(card.summaryReady, timeout=10_000):
        tab.show_panel("Training")
    assert card.facts()["loss"] == "0.75"


def test_tree_names_optimizer_state_by_parameter(tmp_path):
    from ckptview.core import open_checkpoint
    from ckptview.core.inspect.grouping import find_row
    from ckptview.core.session.opening import prepare

    net = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.randn(2, 4)).sum().backward()
    opt.step()
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "c.pt")
    opened = prepare(open_checkpoint(tmp_path / "c.pt"))
    row = find_row(opened.top, "optimizer.state.1.exp_avg_sq")
    assert row.label == "exp_avg_sq" and row.parent.label == "1 · bias"  # the row above names the parameter
    assert "exp_avg_sq of bias" in row.search_name


def test_training_folder_in_the_panels(qtbot, tmp_path, monkeypatch):
    """An HF Trainer checkpoint-N folder: the Training tab reads trainer_state.json, the Optimizer tab names
    parameters from the model file beside the optimizer."""
    from tests.core.read.formats.test_training_folders import hf_trainer_folder

    folder, net, opt, sched, order = hf_trainer_folder(tmp_path, monkeypatch)
    ck = open_checkpoint(str(folder))
    card, panel = TrainingPanel(checkpoint=ck), OptimizerPanel(checkpoint=ck)
    qtbot.addWidget(card)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(card.summaryReady, timeout=10_000):
        card.show()
    facts = card.facts()
    assert facts["global_step"] == "500" and facts["best_metric"] == "0.25" and facts["log.learning_rate"] == "2e-05"
    assert card.section_rows("Schedulers")[0][0] == "scheduler.pt"
    (found,) = panel.optimizers
    assert [p.name for p in found.params] == order
    ck.close()
