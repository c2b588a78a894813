"""The Run panel: device choice to result table, with the worker process driven off the GUI thread."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import warnings

import pytest
import torch
from PySide6.QtCore import Qt

from ckptview.core.run.devices import DeviceInfo
from ckptview.core.run.input_specs import InputSpec, make_array
from ckptview.core.run.model_classes import ModelClass
from ckptview.core.run.result import RunResult, result_json_text
from ckptview.core.worker.device_probe import list_devices
from ckptview.core.worker.forward import to_torch

MODULE = "ckv_panel_models"
CODE = textwrap.dedent('''
    import os
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(20, 256)
            self.act = nn.ReLU()
            self.output = nn.Linear(256, 10)

        def forward(self, x):
            return self.output(self.act(self.hidden(x)))

    class Wrong(nn.Module):
        """Another architecture: none of the checkpoint's keys fit."""
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(20, 10)

        def forward(self, x):
            return self.body(x)

    class Marked(MLP):
        def __setstate__(self, state):
            open(os.path.join(os.path.dirname(__file__), "ran.marker"), "w").close()
            super().__setstate__(state)
''')


@pytest.fixture
def mlp_files(tmp_path):
    (tmp_path / f"{MODULE}.py").write_text(CODE)
    sys.path.insert(0, str(tmp_path))
    try:
        import ckv_panel_models as models

        torch.manual_seed(1)
        mlp = models.MLP().eval()
        torch.save(mlp.state_dict(), tmp_path / "sd.pt")
        marked = models.Marked()
        marked.load_state_dict(mlp.state_dict())
        torch.save(marked, tmp_path / "full.pt")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(MODULE, None)
    return {"dir": tmp_path, "mlp": mlp, "code": str(tmp_path / f"{MODULE}.py"),
            "sd": str(tmp_path / "sd.pt"), "full": str(tmp_path / "full.pt")}


def devices_with_missing_cuda() -> list[DeviceInfo]:
    devices = [d for d in list_devices() if d.kind != "cuda"]
    devices.insert(1, DeviceInfo("cuda", "cuda", False, reason="this torch build has no CUDA"))
    return devices


def test_device_choice_to_result(qtbot, mlp_files) -> None:
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    panel = RunPanel(path=mlp_files["sd"], devices=devices_with_missing_cuda())
    qtbot.addWidget(panel)
    panel.show()
    # an unavailable device is listed, greyed out, with the reason as tooltip, and cannot be chosen
    cuda_row = panel.device_combo.findData("cuda")
    assert panel.device_combo.itemText(cuda_row) == "cuda (unavailable)"
    assert panel.device_combo.itemData(cuda_row, Qt.ItemDataRole.ToolTipRole) == "this torch build has no CUDA"
    assert not panel.select_device("cuda")
    assert panel.select_device("meta") and panel.device() == "meta"
    panel.device_combo.setCurrentIndex(panel.device_combo.findData("cpu"))
    assert panel.device() == "cpu"
    # the state dict's first layer pre-fills the input
    assert panel.input_edit.text() == "2,20@float32=normal"
    assert "state dict" in panel.source_label.text()
    qtbot.keyClicks(panel.model_edit, f"{mlp_files['code']}:MLP")
    panel.runs_spin.setValue(3)

    with qtbot.waitSignal(panel.runFinished, timeout=60_000) as blocker:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
        assert not panel.run_button.isEnabled() and panel.cancel_button.isEnabled()  # GUI thread is free
    result = blocker.args[0]
    assert isinstance(result, RunResult) and result is panel.result
    assert result.device == "cpu" and result.latency_ms.runs == 3 and result.load.tensors == 4

    with torch.no_grad():
        expected = mlp_files["mlp"](to_torch(make_array(InputSpec(shape=(2, 20))), "float32", "cpu")).double()
    assert panel.table.rowCount() == 1
    cells = [panel.table.item(0, c).text() for c in range(panel.table.columnCount())]
    assert cells[:4] == ["output", "2×10", "float32", "cpu"]
    assert cells[4] == f"{float(expected.mean()):.6g}" and cells[7] == f"{float(expected.max()):.6g}"
    assert cells[8:10] == ["0", "0"]
    assert "4 tensors" in panel.summary_label.text() and "latency" in panel.summary_label.text()
    qtbot.waitUntil(lambda: panel.run_button.isEnabled(), timeout=5_000)
    assert not panel.cancel_button.isEnabled()
    assert wait_for_workers(10_000)


def test_full_pickle_needs_confirmation_naming_its_globals(qtbot, mlp_files) -> None:
    from ckptview.gui.panels.run import RunPanel

    asked: list[list[tuple[str, list[str]]]] = []

    def refuse(items: list[tuple[str, list[str]]]) -> bool:
        asked.append(items)
        return False

    panel = RunPanel(path=mlp_files["full"], devices=list_devices(), confirm_trust=refuse)
    qtbot.addWidget(panel)
    assert "full-model pickle" in panel.source_label.text()
    panel.input_edit.setText("2,20")
    with qtbot.waitSignal(panel.runFailed) as blocker:
        assert panel.start_run() is False
    assert blocker.args[0] == "not run: the file was not trusted"
    ((path, names),) = asked[0]
    assert path == mlp_files["full"] and f"{MODULE}.Marked" in names
    assert not panel.is_running()
    assert not os.path.exists(mlp_files["dir"] / "ran.marker")


def test_bad_input_is_shown_without_starting_a_worker(qtbot, mlp_files) -> None:
    from ckptview.gui.panels.run import RunPanel

    panel = RunPanel(path=mlp_files["sd"], devices=list_devices())
    qtbot.addWidget(panel)
    panel.input_edit.setText("2,x")
    panel.model_edit.setText("m:MLP")
    assert panel.start_run() is False
    assert "'x' is not a size" in panel.last_error and not panel.is_running()
    panel.input_edit.setText("2,20")
    panel.model_edit.setText("")
    assert panel.start_run() is False and "Model code" in panel.last_error  # the window's field, not a flag
    assert "--" not in panel.last_error and "--" not in panel.status_label.text()


def test_listed_as_a_panel() -> None:
    from ckptview.gui.app.main_window import PANELS
    from ckptview.gui.panels.run import RunPanel

    assert [p.factory for p in PANELS if p.title == "Run"] == [RunPanel]


def test_compare_needs_its_own_consent_naming_both_files(qtbot, mlp_files, tmp_path) -> None:
    """A trusted main file does not launder the second one: the dialog names both files and their imports."""
    from ckptview.gui.panels.run import RunPanel, consent_text

    stranger = tmp_path / "stranger.pth"
    torch.save(_Payload(str(tmp_path / "stranger.marker")), stranger)
    asked: list[list[tuple[str, list[str]]]] = []
    panel = RunPanel(path=mlp_files["full"], devices=list_devices(),
                     confirm_trust=lambda items: asked.append(items) or False)
    qtbot.addWidget(panel)
    main_findings = panel.state.source.findings
    assert f"{MODULE}.Marked" in main_findings
    panel.state.trusted[mlp_files["full"]] = main_findings  # the main file was trusted before
    panel.input_edit.setText("2,20")
    panel.compare_edit.setText(str(stranger))
    with qtbot.waitSignal(panel.runFailed) as blocker:
        assert panel.start_run() is False
    assert blocker.args[0] == "not run: the file was not trusted"
    ((path, names),) = asked[0]  # only the file not yet trusted is asked about
    assert path == str(stranger) and names == ["posix.system"]
    panel.state.trusted.clear()
    asked.clear()
    assert panel.start_run() is False
    assert [p for p, _ in asked[0]] == [mlp_files["full"], str(stranger)]
    text = consent_text(asked[0])
    assert mlp_files["full"] in text and str(stranger) in text and "posix.system" in text
    assert f"{MODULE}.Marked" in text and "these files" in text
    assert not panel.is_running()
    assert not os.path.exists(tmp_path / "stranger.marker")


class _Payload:
    """Unpickling it runs os.system (a marker file): what a hostile checkpoint does."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_input_probe_does_not_load_an_unsafe_graph(qtbot, tmp_path, monkeypatch) -> None:
    """Showing the run panel of a .pt2 whose sample inputs hold a payload starts no worker and runs nothing: its
    input signature comes from the program's JSON."""
    from ckptview.core.run import request as runner
    from ckptview.gui.panels.run import RunPanel
    from tests.support.crafted import crafted_pt2

    marker = tmp_path / "probe.marker"
    path = crafted_pt2(tmp_path, "sample", str(marker))
    started: list[object] = []
    monkeypatch.setattr(runner, "execute", lambda *a, **k: started.append(a) or iter(()))
    panel = RunPanel(path=path, devices=list_devices())
    qtbot.addWidget(panel)
    assert "posix.system" in panel.state.source.findings
    assert panel.source_label.text().endswith("its pickles name code (posix.system): it runs only if you trust it")
    panel.show()
    qtbot.waitUntil(lambda: panel.input_edit.text() == "x:2,4@float32=normal")  # from the JSON, nothing loaded
    assert started == []
    assert not marker.exists()


def test_no_weights_loaded_is_an_error_state(qtbot, mlp_files) -> None:
    """The wrong model class loads nothing: the panel shows a red error naming the keys, not 'done'."""
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    panel = RunPanel(path=mlp_files["sd"], devices=list_devices())
    qtbot.addWidget(panel)
    panel.input_edit.setText("2,20")
    panel.model_edit.setText(f"{mlp_files['code']}:Wrong")
    panel.runs_spin.setValue(1)
    with qtbot.waitSignal(panel.runFailed, timeout=60_000) as blocker:
        assert panel.start_run()
    assert blocker.args[0].startswith("no weights loaded: none of the checkpoint's 4 tensors fit the model")
    assert "2 missing keys" in blocker.args[0] and "body.weight" in blocker.args[0]
    assert "color:#b00020" in panel.status_label.text() and "done" not in panel.status_label.text()
    assert panel.result is None and panel.table.rowCount() == 0
    assert wait_for_workers(10_000)


MODEL_FILE = textwrap.dedent('''
    import os
    from torch import nn
    open(os.path.join(os.path.dirname(__file__), "imported.marker"), "w").close()  # proof the file ran

    class Helper:
        pass

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(20, 256)
            self.act = nn.ReLU()
            self.output = nn.Linear(256, 10)

        def forward(self, x):
            return self.output(self.act(self.hidden(x)))

    class Bigger(MLP):
        pass
''')


def test_browse_picks_the_file_then_a_class_without_running_it(qtbot, mlp_files, tmp_path, monkeypatch) -> None:
    """Browse… lists the file's classes (nn.Module subclasses first) read with ast; nothing in the file runs."""
    from PySide6.QtWidgets import QFileDialog

    from ckptview.gui.panels.run import RunPanel

    code = tmp_path / "models" / "net.py"
    code.parent.mkdir()
    code.write_text(MODEL_FILE)
    offered: list[tuple[str, list[ModelClass]]] = []
    panel = RunPanel(path=mlp_files["sd"], devices=list_devices(),
                     pick_class=lambda path, classes: offered.append((path, classes)) or "Bigger")
    qtbot.addWidget(panel)
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(code), "Python files (*.py)"))
    assert panel.model_browse.isEnabled()
    qtbot.mouseClick(panel.model_browse, Qt.MouseButton.LeftButton)
    ((path, classes),) = offered
    assert path == str(code) and [(c.name, c.is_module) for c in classes] == [
        ("MLP", True), ("Bigger", True), ("Helper", False)]
    assert panel.model_edit.text() == f"{code}:Bigger"
    assert not (code.parent / "imported.marker").exists()

    # one nn.Module class: taken without asking; a file that is not Python: an error, the field unchanged
    single = tmp_path / "single.py"
    single.write_text("import torch\nclass Config:\n    pass\nclass Net(torch.nn.Module):\n    pass\n")
    assert panel.choose_model_class(str(single)) and panel.model_edit.text() == f"{single}:Net"
    assert len(offered) == 1
    broken = tmp_path / "broken.py"
    broken.write_text("class (:\n")
    assert not panel.choose_model_class(str(broken))
    assert panel.last_error.startswith("broken.py is not valid Python") and panel.model_edit.text().endswith(":Net")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert not panel.choose_model_class(str(empty)) and panel.last_error == "empty.py defines no class"


def test_browse_is_off_for_graphs_that_need_no_code(qtbot, tmp_path) -> None:
    from ckptview.gui.panels.run import RunPanel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is deprecated; such files still exist
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(tmp_path / "ts.pt"))
    panel = RunPanel(path=str(tmp_path / "ts.pt"), devices=list_devices())
    qtbot.addWidget(panel)
    assert not panel.model_browse.isEnabled() and not panel.model_edit.isEnabled()


def test_ctrl_return_runs_and_the_result_copies_as_the_cli_json(qtbot, mlp_files, capsys) -> None:
    """Keyboard: Ctrl+Return in a field starts the run; "Copy result as JSON" copies what `run --json` prints."""
    from PySide6.QtGui import QGuiApplication

    from ckptview import cli
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel
    from tests.support.run_json_cases import skeleton

    panel = RunPanel(path=mlp_files["sd"], devices=list_devices())
    qtbot.addWidget(panel)
    with qtbot.waitActive(panel):  # shortcuts reach the active window only
        panel.show()
        panel.activateWindow()
    assert not panel.copy_button.isEnabled() and not panel.copy_result()
    panel.input_edit.setText("2,20")
    panel.model_edit.setText(f"{mlp_files['code']}:MLP")
    panel.runs_spin.setValue(2)
    panel.input_edit.setFocus()
    with qtbot.waitSignal(panel.runFinished, timeout=60_000):
        qtbot.keyClick(panel.input_edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        assert panel.is_running(), panel.last_error
    qtbot.waitUntil(lambda: panel.run_button.isEnabled(), timeout=10_000)
    assert panel.copy_button.isEnabled()
    QGuiApplication.clipboard().clear()
    qtbot.mouseClick(panel.copy_button, Qt.MouseButton.LeftButton)
    copied = QGuiApplication.clipboard().text()
    assert panel.result is not None and copied == result_json_text(panel.result)
    data = json.loads(copied)
    assert data["outputs"][0]["stats"]["mean"] == panel.result.outputs[0].stats.mean

    status = cli.main(["run", mlp_files["sd"], "--model", f"{mlp_files['code']}:MLP", "--input-shape", "2,20",
                       "--runs", "2", "--json"])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    assert skeleton(data, "") == skeleton(printed, "")  # same keys, same order, same names and counts
    assert wait_for_workers(10_000)


def test_escape_cancels_a_running_job(qtbot, mlp_files, tmp_path) -> None:
    """Keyboard: Escape in the panel stops a run that hangs in the model's forward pass."""
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    code = tmp_path / "slow.py"
    code.write_text(CODE + "\nimport time\n\nclass Slow(MLP):\n    def forward(self, x):\n"
                    "        time.sleep(600)\n        return super().forward(x)\n")
    panel = RunPanel(path=mlp_files["sd"], devices=list_devices())
    qtbot.addWidget(panel)
    with qtbot.waitActive(panel):
        panel.show()
        panel.activateWindow()
    panel.input_edit.setText("2,20")
    panel.model_edit.setText(f"{code}:Slow")
    panel.timeout_spin.setValue(3600)
    assert panel.start_run()
    qtbot.waitUntil(lambda: "forward pass" in panel.status_label.text(), timeout=60_000)
    panel.input_edit.setFocus()
    with qtbot.waitSignal(panel.runFailed, timeout=30_000) as blocker:
        qtbot.keyClick(panel.input_edit, Qt.Key.Key_Escape)
    assert "cancelled" in blocker.args[0] and panel.result is None
    qtbot.waitUntil(lambda: panel.run_button.isEnabled(), timeout=10_000)
    assert wait_for_workers(10_000)


def test_a_model_folder_runs_with_one_click_as_its_library_names_it(qtbot, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    torch.manual_seed(3)
    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16)
    folder = tmp_path / "bert"
    transformers.BertModel(config).save_pretrained(folder)
    panel = RunPanel(path=str(folder), devices=list_devices())
    qtbot.addWidget(panel)
    panel.show()
    assert "transformers BertModel from config.json" in panel.source_label.text()
    # Left empty: the run makes the inputs the model declares, as the command line does with no --input-shape.
    assert panel.input_edit.text() == "" and "the inputs the model declares" in panel.input_edit.placeholderText()
    with qtbot.waitSignal(panel.runFinished, timeout=120_000) as blocker:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    result = blocker.args[0]
    assert result.architecture == {"library": "transformers", "class": "BertModel", "source": "config.json"}
    names = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]
    assert names == ["last_hidden_state", "pooler_output"]
    assert "architecture transformers BertModel from config.json" in panel.summary_label.text()
    assert result.warnings == []
    assert [i.name for i in result.inputs] == ["input_ids", "attention_mask"]
    assert "inputs made: input_ids:1,8@int64=randint:0:40;attention_mask:1,8@int64=ones" in panel.summary_label.text()
    assert wait_for_workers(30_000)


def test_a_folder_that_ships_its_own_code_says_so_and_does_not_run(qtbot, tmp_path) -> None:
    from ckptview.gui.panels.run import RunPanel

    folder = tmp_path / "remote-code"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["Evil"], "model_type": "evil",
                                                    "auto_map": {"AutoModel": "modeling_evil.Evil"}}))
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    panel = RunPanel(path=str(folder), devices=list_devices())
    qtbot.addWidget(panel)
    panel.show()
    assert "auto_map" in panel.source_label.text() and "never runs code" in panel.source_label.text()
    assert not panel.start_run()  # no model code given, and the folder's own is refused
    assert panel._worker is None
