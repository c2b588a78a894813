"""The window's Run and `ckptview run` are one code path (issue 33, finding 4): the same folder gives the same
inputs, the same call and the same outputs with one click as on the command line. A save_pretrained GPT-2
folder failed in the window (`'Tensor' object has no attribute 'get_seq_length'`: its attention mask went in
by position, as past_key_values); the bundled example ran only on the command line, with code (finding 5).

GPT-2 and the example go through real worker processes on both sides; the other families through the
worker's code in this process (`tests/support/run_here.py`), to keep the file to seconds. For every other
architecture of the matrix, one click sends the very request the command line sends, to the same function.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
from PySide6.QtCore import Qt

from ckptview import cli
from ckptview.core.run import request as runner
from ckptview.core.run.example import example_path
from ckptview.core.run.process import RunError
from ckptview.core.run.result import RunResult
from ckptview.core.worker.device_probe import list_devices
from tests.support.library_matrix import CASES, combos, write_folder
from tests.support.run_here import worker_here

transformers = pytest.importorskip("transformers")

# One architecture per family, in the first way the matrix writes it; (name, in a real worker?)
FAMILIES = [("gpt2", True), ("t5", False), ("clip", False), ("whisper", False), ("wav2vec2", False),
            ("resnet", False), ("vit", False)]


def cli_result(capsys, path: str, here: bool) -> dict:
    with worker_here() if here else contextlib.nullcontext():
        status = cli.main(["run", path, "--json", "--runs", "1", "--warmup", "0"])
    out = capsys.readouterr()
    assert status == 0, out.err
    return json.loads(out.out)


def window_result(qtbot, path: str, here: bool, words: str = "from config.json") -> RunResult:
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    panel = RunPanel(path=path, devices=list_devices())
    qtbot.addWidget(panel)
    panel.show()
    assert words in panel.source_label.text()
    panel.runs_spin.setValue(1)
    assert panel.input_edit.text() == ""  # nothing typed: the model's declared inputs, as on the command line
    with worker_here() if here else contextlib.nullcontext(), \
            qtbot.waitSignal(panel.runFinished, timeout=240_000) as blocker:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)  # one click
    assert wait_for_workers(60_000)
    assert "done on cpu" in panel.status_label.text()
    return blocker.args[0]


def assert_same_run(window: RunResult, command_line: dict) -> None:
    assert window.architecture == command_line["architecture"]
    assert [i.to_json() for i in window.inputs] == command_line["inputs"]
    ours = {o.name: o.to_json() for o in window.outputs}
    theirs = {o["name"]: o for o in command_line["outputs"]}
    assert ours == theirs  # shapes, dtypes, statistics and first values: the same computation
    assert window.load.to_json() | {"seconds": None} == command_line["load"] | {"seconds": None}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    """Every architecture of the matrix, in the first way the matrix writes it."""
    root = str(tmp_path_factory.mktemp("families"))
    return {case.name: write_folder(case, combos(i)[0], root) for i, case in enumerate(CASES)
            if hasattr(transformers, case.cls)}


@pytest.mark.parametrize(("name", "real"), FAMILIES, ids=[n for n, _ in FAMILIES])
def test_the_window_runs_a_folder_as_the_command_line_does(qtbot, capsys, folders, name, real):
    command_line = cli_result(capsys, folders[name], here=not real)
    window = window_result(qtbot, folders[name], here=not real)
    assert_same_run(window, command_line)


def test_the_bundled_example_runs_with_one_click(qtbot, capsys):
    command_line = cli_result(capsys, example_path(), here=False)
    window = window_result(qtbot, example_path(), here=False, words="the bundled example")
    assert window.architecture["library"] == "ckptview"
    assert_same_run(window, command_line)


def test_a_weight_not_loaded_is_red_unless_a_partial_load_is_allowed(qtbot, tmp_path):
    from safetensors.torch import load_file, save_file

    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    index = next(i for i, c in enumerate(CASES) if c.name == "llama")
    folder = write_folder(CASES[index], "safetensors fp32", str(tmp_path))
    saved = load_file(f"{folder}/model.safetensors")
    gone = "model.layers.0.self_attn.o_proj.weight"
    del saved[gone]
    save_file(saved, f"{folder}/model.safetensors", metadata={"format": "pt"})
    panel = RunPanel(path=folder, devices=list_devices())
    qtbot.addWidget(panel)
    panel.show()
    panel.runs_spin.setValue(1)
    with worker_here():
        with qtbot.waitSignal(panel.runFailed, timeout=120_000) as failed:
            qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
        assert wait_for_workers(60_000)
        assert gone in failed.args[0] and "Allow missing weights" in failed.args[0] and "--" not in failed.args[0]
        assert "#b00020" in panel.status_label.text() and panel.result is None  # red, no table
        panel.allow_missing_box.setChecked(True)
        qtbot.waitUntil(panel.run_button.isEnabled, timeout=10_000)
        with qtbot.waitSignal(panel.runFinished, timeout=120_000) as done:
            qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
        assert wait_for_workers(60_000)
    assert done.args[0].partial == [gone]
    assert "partial load on cpu: 1 weight(s)" in panel.status_label.text() and gone in panel.status_label.text()
    rows = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]
    assert rows and all(r.endswith("(partial load)") for r in rows)
    lines = panel.summary_label.text().splitlines()
    assert lines and all(line.endswith("[partial load: 1 weight not from the file]") for line in lines)


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_one_click_sends_the_command_line_s_request_for_every_matrix_folder(qtbot, monkeypatch, folders, case):
    """Every architecture of the matrix: one click sends the request `ckptview run FOLDER` sends, to the same
    `run_iter` (which the matrix checks against the library); the runs above show that path's results agree."""
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel

    if case not in folders:
        pytest.skip(f"transformers {transformers.__version__} lacks it")
    sent = []

    def captured(request, token=None, remote=None):
        sent.append(request)
        raise RunError("captured")
        yield  # a generator, as run_iter is

    monkeypatch.setattr(runner, "run_iter", captured)
    folder = folders[case]
    assert cli.main(["run", folder]) == 1
    panel = RunPanel(path=folder, devices=list_devices())
    qtbot.addWidget(panel)
    panel.show()
    assert "from config.json" in panel.source_label.text() and panel.input_edit.text() == ""
    with qtbot.waitSignal(panel.runFailed, timeout=60_000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert wait_for_workers(60_000)
    command_line, window = sent
    assert dataclasses.asdict(window) == dataclasses.asdict(command_line)
