"""A window user is never sent to the command line (issue 35, finding 7).

A run folder opened as a file said to type `ckptview series …`; a URL whose server ignores range requests
said "pass --download". Each message now offers the action as a button: "Open as series", "Open NAME",
"Download and open (SIZE)" with progress and Cancel, the size said before anything is downloaded.
"""

from __future__ import annotations

import os
import re
import threading

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton

from ckptview.core.units import human_bytes
from tests.support.guihelpers import make_state_dict, wait_settled

CLI_WORDS = re.compile(r"`ckptview|ckptview (series|info|diff)|--[a-z]")


def page_texts(tab) -> str:
    """Every text the tab's current page shows: labels and buttons."""
    page = tab.stack.currentWidget()
    return "\n".join([w.text() for w in page.findChildren(QLabel)] + [b.text() for b in page.findChildren(QPushButton)])


@pytest.fixture
def run_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    model = torch.nn.Linear(4, 3)
    for step in (10, 20, 30):
        torch.save({"step": step, "model": model.state_dict()}, folder / f"step_{step}.pt")
    return folder


def test_a_run_folder_offers_open_as_series(qtbot, window, run_folder):
    from ckptview.gui.series.tab import SeriesTab

    (tab,) = window.open_paths([str(run_folder)])
    wait_settled(qtbot, tab)
    assert tab.state == "error"
    shown = page_texts(tab)
    assert "3 checkpoints" in shown and "step_10.pt" in shown, shown
    assert not CLI_WORDS.search(shown), shown
    status = window.statusBar().currentMessage()
    assert "3 checkpoints" in status and not CLI_WORDS.search(status), status
    button = tab.error_actions["series"]
    assert button.text() == "Open as series" and button.isVisible()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    series = window.tabs.currentWidget()
    assert isinstance(series, SeriesTab) and series.paths == [str(run_folder)]
    assert all(t is not tab for t in window.checkpoint_tabs())  # the error tab made room for the run
    with qtbot.waitSignal(series.finished, timeout=60_000):
        pass
    assert [os.path.basename(c.path) for c in series.result.checkpoints] == ["step_10.pt", "step_20.pt",
                                                                            "step_30.pt"]


def test_a_folder_of_one_checkpoint_offers_to_open_it(qtbot, window, tmp_path):
    folder = tmp_path / "one"
    folder.mkdir()
    make_state_dict(str(folder / "model.pth"))
    (tab,) = window.open_paths([str(folder)])
    wait_settled(qtbot, tab)
    assert tab.state == "error" and not CLI_WORDS.search(page_texts(tab)), page_texts(tab)
    button = tab.error_actions["open"]
    assert button.text() == "Open model.pth"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    opened = window.current_tab()
    assert opened is not None and opened.path == str(folder / "model.pth")
    wait_settled(qtbot, opened)
    assert opened.state == "ready"
    assert all(t is not tab for t in window.checkpoint_tabs())


@pytest.fixture
def no_ranges(tmp_path):
    pytest.importorskip("requests")
    from tests.support.remote_server import RangeServer

    torch.manual_seed(0)
    torch.save({"w": torch.randn(1024, 1024), "b": torch.zeros(3)}, tmp_path / "big.pt")  # 4 MiB
    server = RangeServer(str(tmp_path), honour_range=False)
    yield server, tmp_path / "big.pt"
    server.stop()


def test_a_server_without_ranges_offers_download_and_open(qtbot, window, no_ranges):
    server, local = no_ranges
    size = local.stat().st_size
    (tab,) = window.open_paths([f"{server.url}/big.pt"])
    wait_settled(qtbot, tab, timeout=30_000)
    assert tab.state == "error"
    shown = page_texts(tab)
    assert not CLI_WORDS.search(shown), shown
    assert f"{size:,} bytes" in shown and human_bytes(size) in shown  # the size, said before downloading
    button = tab.error_actions["download"]
    assert button.text() == f"Download and open ({human_bytes(size)})"
    seen: list[str] = []
    tab.opener.progress.connect(lambda step: seen.append(step.message))
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert tab.state == "loading"
    wait_settled(qtbot, tab, timeout=60_000)
    assert tab.state == "ready", tab.error_text
    assert any("download" in m for m in seen), seen
    names = {e.name for e in tab.checkpoint.tensors()}
    assert names == set(torch.load(local, weights_only=True))
    assert not window.workspace.remote.download  # the consent was this open's, not the window's


def test_a_download_can_be_cancelled(qtbot, window, no_ranges, monkeypatch):
    from ckptview.core.read.bytes.remote import http

    server, _local = no_ranges
    real = http.HttpBackend.download
    outcomes: list[str] = []

    def spy(self, *args, **kwargs):
        try:
            real(self, *args, **kwargs)
        except BaseException as exc:
            outcomes.append(type(exc).__name__)
            raise
        outcomes.append("done")

    monkeypatch.setattr(http.HttpBackend, "download", spy)
    (tab,) = window.open_paths([f"{server.url}/big.pt"])
    wait_settled(qtbot, tab, timeout=30_000)
    server.stall = threading.Event()  # the answer waits after its first MiB
    steps: list[object] = []
    tab.opener.progress.connect(steps.append)
    qtbot.mouseClick(tab.error_actions["download"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: any("download" in s.message and s.done > 0 for s in steps), timeout=30_000)
    assert "download" in tab.loading_label.text()
    tab.cancel()
    assert tab.state == "error" and "cancelled" in tab.error_text
    server.stall.set()  # the rest arrives: the download stops at its next piece
    from ckptview.gui.base.workers import wait_for_workers

    assert wait_for_workers(30_000)
    assert outcomes == ["Cancelled"]


def test_a_hub_folder_with_other_checkpoints_links_to_them(qtbot, window, tmp_path):
    transformers = pytest.importorskip("transformers")
    from ckptview.gui.series.tab import SeriesTab

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=2)
    torch.manual_seed(0)
    folder = tmp_path / "hub"
    transformers.LlamaForCausalLM(config).save_pretrained(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").exists()
    for step in (1, 2):
        torch.save({"step": step, "w": torch.ones(2)}, folder / f"step_{step}.pt")
    (tab,) = window.open_paths([str(folder)])
    wait_settled(qtbot, tab, timeout=30_000)
    assert tab.state == "ready", tab.error_text
    text = tab.banner.findChild(QLabel, "bannerText")
    assert "step_1.pt" in text.text() and not CLI_WORDS.search(text.text()), text.text()
    text.linkActivated.emit("open:1")
    assert window.current_tab().path == str(folder / "step_2.pt")
    text.linkActivated.emit("series:")
    series = window.tabs.currentWidget()
    assert isinstance(series, SeriesTab) and series.paths == [str(folder)]
    with qtbot.waitSignal(series.finished, timeout=60_000):
        pass


def test_a_folder_of_many_checkpoints_offers_each_a_comparison_and_a_series(qtbot, window, tmp_path):
    """Sixteen unrelated checkpoints read as `hf-sharded-safetensors, 2 tensors` (one stray bf16 file): the
    folder says what it holds and offers the latest, the first and latest compared, the series, and each."""
    from safetensors.torch import save_file

    from ckptview.gui.compare.tab import CompareTab

    folder = tmp_path / "zoo"
    folder.mkdir()
    for i in (1, 2, 10):
        torch.save(torch.nn.Linear(2 + i, 3).state_dict(), folder / f"probe_{i}.pt")
    save_file({"emb": torch.zeros(4, 2, dtype=torch.bfloat16)}, str(folder / "stray.safetensors"))
    names = ["probe_1.pt", "probe_2.pt", "probe_10.pt", "stray.safetensors"]
    (tab,) = window.open_paths([str(folder)])
    wait_settled(qtbot, tab)
    assert tab.state == "error"
    shown = page_texts(tab)
    assert "4 checkpoints" in shown and not CLI_WORDS.search(shown), shown
    assert "no checkpoint" not in shown  # the sentence of defect 8
    assert set(tab.error_actions) >= {"series", "compare", "open", "each"}
    assert names[-1] in tab.error_actions["open"].toolTip()  # the latest, not the first
    menu = tab.error_actions["each"].menu()
    assert [a.text() for a in menu.actions()] == names
    width = sum(b.sizeHint().width() for b in tab.error_actions.values())
    assert width < 900  # the buttons fit a 1024 px window, whatever the names
    menu.actions()[1].trigger()  # one of them, the error page stays for the others
    opened = window.current_tab()
    assert opened is not None and opened.path == str(folder / "probe_2.pt")
    window.tabs.setCurrentWidget(tab)
    qtbot.mouseClick(tab.error_actions["compare"], Qt.MouseButton.LeftButton)
    compare = window.tabs.currentWidget()
    assert isinstance(compare, CompareTab)
    assert (compare.path_a, compare.path_b) == (str(folder / names[0]), str(folder / names[-1]))


def test_a_one_file_save_pretrained_folder_has_no_shard_column(qtbot, window, tmp_path):
    transformers = pytest.importorskip("transformers")
    from ckptview.gui.checkpoint.tree_model import SHARD

    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "one")
    (tab,) = window.open_paths([str(tmp_path / "one")])
    wait_settled(qtbot, tab)
    assert tab.state == "ready"
    assert tab.checkpoint.format == "hf-safetensors"
    assert tab.tree.isColumnHidden(SHARD) and SHARD not in tab.tree.applicable
