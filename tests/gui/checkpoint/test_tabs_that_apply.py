"""Side tabs and tree entries that apply to the file (issue 45, defect 4).

Optimizer and Training were always there (a Hub folder, a .pt2, TorchScript) and at 1024 px they pushed Run
into the overflow menu; a TorchScript tree listed every module's `training`, `_is_full_backward_hook` and
`_reversed_padding_repeated_twice` (41 entries for 11 tensors).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from tests.support.guihelpers import wait_settled


def conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 10)).eval()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("apply")
    net = conv_net()
    out = {"script": str(folder / "script.pt"), "pt2": str(folder / "net.pt2"), "full": str(folder / "full.pt"),
           "training": str(folder / "train.pt")}
    # Scripted in a process of its own: TorchScript renames a class compiled twice in one process
    # (`___torch_mangle_N`), which other tests of the suite, reading code by class name, would then meet.
    script = ("import sys, warnings, torch\nwarnings.simplefilter('ignore')\nfrom torch import nn\n"
              "torch.manual_seed(0)\nnet = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), "
              "nn.Flatten(), nn.Linear(144, 10)).eval()\ntorch.jit.save(torch.jit.script(net), sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", script, out["script"]], check=True, timeout=300)
    torch.export.save(torch.export.export(net, (torch.randn(2, 3, 8, 8),)), out["pt2"])
    torch.save(net, out["full"])
    opt = torch.optim.Adam(net.parameters())
    net.train()(torch.randn(2, 3, 8, 8)).sum().backward()
    opt.step()
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": 2, "loss": 0.5}, out["training"])
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    transformers.LlamaForCausalLM(config).save_pretrained(folder / "llama", max_shard_size="8KB")
    out["hub"] = str(folder / "llama")
    return out


def opened(qtbot, window, path, size=(1024, 640)):
    window.resize(*size)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == size)
    (tab,) = window.open_paths([path])
    wait_settled(qtbot, tab, timeout=30_000)
    assert tab.state == "ready", tab.error_text
    return tab


def titles(tab) -> list[str]:
    return [tab.side_tabs.tabText(i) for i in range(tab.side_tabs.count())]


@pytest.mark.parametrize("case", ["script", "pt2", "hub", "full"])
def test_optimizer_and_training_tabs_only_where_they_apply(qtbot, window, files, case):
    tab = opened(qtbot, window, files[case])
    assert "Optimizer" not in titles(tab) and "Training" not in titles(tab), titles(tab)
    run = titles(tab).index("Run")
    assert run not in tab.side_tabs.hidden_tabs()  # on the bar at 1024 px, not in the » menu


def test_a_training_checkpoint_keeps_both(qtbot, window, files):
    tab = opened(qtbot, window, files["training"])
    assert {"Optimizer", "Training"} <= set(titles(tab))


def test_a_torchscript_tree_lists_no_module_bookkeeping(qtbot, window, files):
    tab = opened(qtbot, window, files["script"])
    names = [row.name for row in tab.model.flat_rows() if row.node is not None and row.node.kind == "value"]
    bookkeeping = [n for n in names if n.rsplit(".", 1)[-1] in ("training", "_is_full_backward_hook")
                   or "_reversed_padding_repeated_twice" in n]
    assert not bookkeeping, bookkeeping
    assert tab.top.tensors == 9  # conv and linear weights and biases, BatchNorm's five


def test_a_pt2_signature_reads_whole_in_the_shape_column(qtbot, window, files):
    """`x: float32[2, 3, 8, 8]` was cut short in the Shape column (a value's text counted 16 characters)."""
    from ckptview.gui.checkpoint.tree_model import SHAPE
    from tests.support.layout_checks import cut_in_any_row

    tab = opened(qtbot, window, files["pt2"])
    tab.expand_all()
    rows = [r for r in tab.model.flat_rows() if r.name.startswith("signature.") and r.node.kind == "value"]
    assert rows
    for row in rows:
        shown = tab.model.index_of(row).siblingAtColumn(SHAPE).data()
        assert shown == row.node.value, shown  # the spec itself, not its repr in quotes
    assert not cut_in_any_row(tab.tree, SHAPE, "pt2")
