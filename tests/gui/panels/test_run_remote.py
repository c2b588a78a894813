"""The run panel of a URL's tab: the remote folder's config.json is fetched in a worker (never on the window's
thread), the architecture pre-filled as for a local folder, with progress, Cancel and one-line errors that
carry no credentials."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch
from PySide6.QtCore import Qt

from ckptview.core.worker.device_probe import list_devices
from tests.support.remote_server import RangeServer

pytest.importorskip("fsspec")
pytest.importorskip("requests")


@pytest.fixture
def served(tmp_path):
    """A server over tmp_path/served: a tiny BERT folder as transformers saves it, and one that ships code."""
    transformers = pytest.importorskip("transformers")
    root = tmp_path / "served"
    torch.manual_seed(5)
    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    transformers.BertModel(config).save_pretrained(root / "bert")
    evil = root / "evil"
    evil.mkdir()
    (evil / "config.json").write_text(json.dumps({"architectures": ["Evil"], "model_type": "evil",
                                                  "auto_map": {"AutoModel": "modeling_evil.Evil"}}))
    torch.save({"w": torch.zeros(2)}, evil / "pytorch_model.bin")
    server = RangeServer(str(root))
    yield server
    server.stop()


def remote_panel(qtbot, url: str):
    """The Run panel as a URL's tab builds it: over the checkpoint the tab opened (in the test's thread)."""
    from ckptview.core import open_checkpoint
    from ckptview.gui.checkpoint.host import CheckpointContext
    from ckptview.gui.panels.run import RunPanel

    checkpoint = open_checkpoint(url)
    panel = RunPanel(CheckpointContext(checkpoint=checkpoint, path=url), devices=list_devices())
    qtbot.addWidget(panel)
    return panel, checkpoint


def test_a_remote_folder_is_recognised_in_a_worker_and_runs_with_one_click(qtbot, served, monkeypatch) -> None:
    from ckptview.core.run import fetch as run_fetch
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    gui_thread = threading.get_ident()
    reads: list[int] = []
    real_read, real_progress = run_fetch._read_config, RunPanel._on_recognize_progress

    def watched(fs, url, token):
        reads.append(threading.get_ident())
        return (yield from real_read(fs, url, token))

    shown: list[str] = []

    def progress(self, value):
        real_progress(self, value)
        shown.append(self.status_label.text())

    monkeypatch.setattr(run_fetch, "_read_config", watched)
    monkeypatch.setattr(RunPanel, "_on_recognize_progress", progress)
    panel, checkpoint = remote_panel(qtbot, f"{served.url}/bert/")
    try:
        # The open reads config.json as data (a quantization_config); the panel reads it only when shown.
        assert reads == []
        with qtbot.waitSignal(panel.recognitionFinished, timeout=60_000) as blocker:
            panel.show()
            assert not panel.run_button.isEnabled() and panel.cancel_button.isEnabled()  # Run waits
            assert "reading the model's config.json" in panel.source_label.text()
        assert reads and all(ident != gui_thread for ident in reads)  # fetched off the window's thread
        size = os.path.getsize(os.path.join(served.root, "bert", "config.json"))
        assert f"reading {served.url}/bert/config.json ({size} B of {size} B)…" in shown
        assert "transformers BertModel from config.json" in blocker.args[0]
        assert panel.source_label.text() == blocker.args[0]
        assert panel.input_edit.text() == ""  # as for a local folder: the run makes what the model declares
        assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
        with qtbot.waitSignal(panel.runFinished, timeout=180_000) as done:
            qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
        result = done.args[0]
        assert result.architecture == {"library": "transformers", "class": "BertModel", "source": "config.json"}
        assert {o.name for o in result.outputs} == {"last_hidden_state", "pooler_output"}
        assert wait_for_workers(30_000)
    finally:
        checkpoint.close()


def test_a_remote_folder_that_ships_its_code_is_refused_in_one_line(qtbot, served) -> None:
    panel, checkpoint = remote_panel(qtbot, f"{served.url}/evil/")
    try:
        with qtbot.waitSignal(panel.recognitionFinished, timeout=60_000) as blocker:
            panel.show()
        words = blocker.args[0]
        assert "auto_map" in words and "never runs code" in words and "\n" not in words
        assert not panel.start_run()  # no model code given, and the folder's own is refused
        assert panel._worker is None
    finally:
        checkpoint.close()


def test_an_unreadable_config_is_one_line_without_credentials(qtbot, served) -> None:
    host = served.url.split("://", 1)[1]
    url = f"http://me:pw@{host}/bert/?token=hf_SECRET"
    panel, checkpoint = remote_panel(qtbot, url)
    try:
        served.lie = "long"  # from now on every range answer carries more bytes than asked for
        with qtbot.waitSignal(panel.recognitionFinished, timeout=60_000) as blocker:
            panel.show()
        for text in (blocker.args[0], panel.status_label.text(), panel.status_label.toolTip()):
            assert "SECRET" not in text and "pw@" not in text, text
        assert f"config.json of {served.url}/bert/ not read: cannot read {served.url}/bert/config.json: the " \
            "server sent" in blocker.args[0]
        assert "\n" not in panel.status_label.toolTip() and panel.status_label.toolTip()
        assert panel.run_button.isEnabled()  # model code can still be given
    finally:
        checkpoint.close()


def test_cancel_stops_reading_the_config(qtbot, served) -> None:
    panel, checkpoint = remote_panel(qtbot, f"{served.url}/bert/")
    served.hang = threading.Event()  # the server answers nothing until released
    try:
        with qtbot.waitSignal(panel.recognitionFinished, timeout=60_000) as blocker:
            with qtbot.waitActive(panel):
                panel.show()
                panel.activateWindow()
            assert panel.cancel_button.isEnabled()
            jobs = set(panel.recognize_job._workers)  # this panel's request: Cancel lets go of it
            panel.input_edit.setFocus()
            qtbot.keyClick(panel.input_edit, Qt.Key.Key_Escape)  # Escape cancels, as for a run
            assert panel.status_label.text() == "cancelling…"
            served.hang.set()  # the request in flight returns; the job stops at its next check
        assert "cancelled" in blocker.args[0] and "give model code" in blocker.args[0]
        assert panel.state.arch is None and panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
        assert jobs  # ... and its thread returns (another test's jobs may still be winding down: not waited for)
        qtbot.waitUntil(lambda: all(job.is_done for job in jobs), timeout=30_000)
    finally:
        served.hang = None
        checkpoint.close()


def test_a_file_url_is_recognised_by_its_keys_without_a_config(qtbot, served, monkeypatch) -> None:
    """A run downloads a file URL alone (no config beside it): the tab names it by keys and shapes, as the run
    will, and reads no config.json. Without torchvision here, the line says what brings it."""
    import importlib.util

    from ckptview.core.run import architectures

    real = importlib.util.find_spec
    monkeypatch.setattr(architectures.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchvision" else real(name, *a))
    state = {"conv1.weight": torch.zeros(4, 3, 7, 7), "fc.weight": torch.zeros(10, 8)}
    for stage in range(1, 5):
        for block in range(2):
            state[f"layer{stage}.{block}.conv1.weight"] = torch.zeros(4, 4, 3, 3)
    folder = os.path.join(served.root, "vision")
    os.makedirs(folder)
    torch.save(state, os.path.join(folder, "resnet18.pth"))
    with open(os.path.join(folder, "config.json"), "w") as fh:  # beside it, but a run never fetches it
        fh.write("{}")
    panel, checkpoint = remote_panel(qtbot, f"{served.url}/vision/resnet18.pth")
    try:
        with qtbot.waitSignal(panel.recognitionFinished, timeout=60_000) as blocker:
            panel.show()
        assert ("torchvision resnet18 from keys and shapes: torchvision is not installed "
                "(pip install 'ckptview[vision]'") in blocker.args[0]
        assert not any(p.endswith("config.json") for p in served.counters.paths)
    finally:
        checkpoint.close()


def test_the_window_s_run_tab_of_a_url_recognises_its_folder(qtbot, window, served) -> None:
    """The same through the window: a folder URL opened as a tab, its Run side tab shown."""
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel
    from tests.support.guihelpers import wait_settled

    (tab,) = window.open_paths([f"{served.url}/bert/"])
    wait_settled(qtbot, tab, timeout=60_000)
    assert tab.state == "ready", tab.error_text
    titles = [tab.side_tabs.tabText(i) for i in range(tab.side_tabs.count())]
    tab.side_tabs.setCurrentIndex(titles.index("Run"))
    panel = tab.side_tabs.currentWidget().findChild(RunPanel)
    assert panel is not None
    qtbot.waitUntil(lambda: "transformers BertModel from config.json" in panel.source_label.text(),
                    timeout=60_000)
    assert panel.input_edit.text() == "" and "the inputs the model declares" in panel.input_edit.placeholderText()
    assert wait_for_workers(30_000)
