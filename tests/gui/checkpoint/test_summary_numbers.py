"""The window says the numbers torch and `info --json` say: the summary's Parameters is
`sum(p.numel() for p in model.parameters())` (a .pt2's sample inputs, a Lightning callback's score and ZeRO-3's
placeholders are no parameters), and the Statistics tab shows a module's `"modules"` figures, its counters on
their own line. Files made by torch, torch.export, Lightning's Trainer and in DeepSpeed's layout."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

from ckptview.commands.info import info_dict  # noqa: E402
from ckptview.core import open_checkpoint  # noqa: E402
from ckptview.gui.panels.statistics import StatsPanel, format_figure  # noqa: E402
from tests.support.counted_models import exported_file, lightning_file, resnet_file  # noqa: E402
from tests.support.deepspeed_run import Net, write_run  # noqa: E402
from tests.support.guihelpers import wait_settled  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """name -> (torch's count of the model's parameters, the file, modules whose figures are checked)."""
    folder = tmp_path_factory.mktemp("counted")
    resnet, resnet_path = resnet_file(folder)
    truth = sum(p.numel() for p in resnet.parameters())
    out = {"resnet": (truth, resnet_path, ["layer1", "layer2.0.downsample", "bn1"])}
    out["exported"] = (truth, exported_file(folder, resnet), [])
    module, path = lightning_file(folder)
    out["lightning"] = (sum(p.numel() for p in module.parameters()), path, ["state_dict", "optimizer_states.0"])
    return out


def _json(path: str) -> dict:
    ckpt = open_checkpoint(path)
    try:
        return json.loads(json.dumps(info_dict(ckpt, stats=True)))
    finally:
        ckpt.close()


def _check_window(qtbot, window, path: str, truth: int, modules: list[str]) -> None:
    data = _json(path)
    assert data["parameters"] == truth
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab, timeout=30_000)
    assert tab.state == "ready"
    assert tab.summary.facts["Parameters"] == f"{truth:,}"
    assert tab.summary.headline.endswith(f"{truth:,} parameters")
    rows = {m["path"]: m for m in data["modules"]}
    panel = tab.show_panel("Statistics")
    assert isinstance(panel, StatsPanel)
    for name in modules:
        row = rows[name]
        with qtbot.waitSignal(panel.statsReady, timeout=30_000):
            assert tab.select_name(name)
        shown = panel.figures()
        assert panel.targets[0][0] == f"{name} ({row['tensors']} tensors)"
        for key in ("numel", "mean", "min", "max", "zeros"):
            assert shown[key] == format_figure(key, row["stats"][key], row["stats"]["numel"]), (name, key)
        counters = row["counters"]
        if counters is None:
            assert panel.counters.isHidden()
        else:  # each counter with its value, on its own line, as in --json (there: merged)
            text = panel.counters.text()
            assert text.startswith("counters apart: ") and "…" not in text, text
            assert format_figure("max", counters["stats"]["max"], 1) in text, text
            assert text.count(" = ") + text.count(" max ") == min(counters["tensors"], 6), text


@pytest.mark.parametrize("made", ["resnet", "exported", "lightning"])
def test_the_window_says_what_torch_and_info_say(qtbot, window, files, made) -> None:
    truth, path, modules = files[made]
    _check_window(qtbot, window, path, truth, modules)


def test_a_zero3_step_counts_its_partitioned_parameters(qtbot, window, tmp_path, monkeypatch) -> None:
    (step,) = write_run(tmp_path / "out", monkeypatch, steps=(3,), stage=3, world=2)
    truth = sum(p.numel() for p in Net().parameters())
    _check_window(qtbot, window, step.folder, truth, ["zero_pp_rank_0_mp_rank_00_model_states.pt"])


def test_the_tree_s_parameters_column_means_what_the_summary_means(qtbot, window, tmp_path) -> None:
    """The summary said 7,946 parameters while the tree's Parameters column gave `optimizer_state_dict` 15,896
    and `step of fc1.weight` 1: it counted every element. One meaning: the model's parameters."""
    import torch
    from PySide6.QtCore import Qt

    from ckptview.gui.checkpoint.tree_model import PARAMS

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 20)).sum().backward()
    opt.step()
    path = tmp_path / "mlp.pth"
    torch.save({"model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict(), "epoch": 1}, path)
    truth = sum(p.numel() for p in model.parameters())
    (tab,) = window.open_paths([str(path)])
    wait_settled(qtbot, tab, timeout=30_000)
    assert tab.summary.facts["Parameters"] == f"{truth:,}"

    def cell(name: str) -> str:
        assert tab.select_name(name), name
        return tab.tree.selectionModel().selectedRows(PARAMS)[0].data()

    assert cell("model_state_dict") == f"{truth:,}"
    assert cell("model_state_dict.0.weight") == "5,120"
    assert cell("optimizer_state_dict") == "" and cell("optimizer_state_dict.state.0.step") == ""
    assert cell("optimizer_state_dict.state.0.exp_avg") == ""
    header = tab.model.headerData(PARAMS, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)
    assert "model.parameters()" in header
