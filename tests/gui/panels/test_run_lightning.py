"""The run panel on a Lightning checkpoint: the class the file names is shown with the consent it needs, and Run
asks for it (naming the class) before any worker starts; the user's own class needs none."""

from __future__ import annotations

import importlib.util

import pytest

from ckptview.core.run.process import RunError
from ckptview.core.worker.device_probe import list_devices
from tests.core.run.test_lightning import CLASS_PATH, PACKAGE, _cli_checkpoint, _imported_elsewhere, lit

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")]
__all__ = ["lit"]  # the fixture, used by name


def test_the_run_tab_names_the_class_and_asks_before_importing_it(lit, qtbot, tmp_path, monkeypatch) -> None:
    from ckptview.core.run import request as runner
    from ckptview.gui.panels.run import RunPanel

    path = _cli_checkpoint(lit, tmp_path / "x.ckpt", hidden=6)
    started: list[dict] = []

    def fake_execute(payload: dict, timeout: float, token: object = None):  # noqa: ANN202 - a generator
        started.append(payload)
        yield from ()
        raise RunError("stopped here", kind="input")

    monkeypatch.setattr(runner, "execute", fake_execute)
    answers = [False, True]
    asked: list[list[tuple[str, list[str]]]] = []
    panel = RunPanel(path=path, devices=list_devices(),
                     confirm_trust=lambda items: asked.append(items) or answers.pop(0))
    qtbot.addWidget(panel)
    text = panel.source_label.text()
    assert f"lightning {CLASS_PATH} from hyper_parameters._class_path" in text
    assert "runs code chosen by the file, only if you trust it" in text
    assert panel.model_edit.isEnabled()  # the user may give their own class instead
    panel.show()
    qtbot.waitUntil(lambda: panel.input_edit.text() == "2,4@float32=normal")  # guessed from the state dict's first layer
    with qtbot.waitSignal(panel.runFailed) as blocker:
        assert panel.start_run() is False
    assert blocker.args[0] == "not run: the file was not trusted"
    assert asked == [[(path, [CLASS_PATH])]] and started == []
    with qtbot.waitSignal(panel.runFailed, timeout=30_000):
        assert panel.start_run() is True
    (payload,) = started
    assert payload["source"] == "lightning" and payload["consent"]["main"] == [CLASS_PATH]
    assert payload["lightning"]["class_path"] == CLASS_PATH
    assert _imported_elsewhere(lit) == set()

    panel.model_edit.setText(f"{PACKAGE}.models:Net")  # the user's class: no question
    with qtbot.waitSignal(panel.runFailed, timeout=30_000):
        assert panel.start_run() is True
    assert len(asked) == 2 and started[-1]["consent"]["main"] is None
