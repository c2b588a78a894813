"""Issue 24, finding 2 (and 3 in the window): showing the run panel runs nothing from the file; running a graph
asks once per file, in a dialog naming the code that would run."""

from __future__ import annotations

import pytest

from ckptview.core.worker.device_probe import list_devices
from tests.core.run.test_gate_sees_what_torch_sees import GCC, _aoti_pt2, from_file_archive


def _hostile(kind: str, tmp_path) -> tuple[str, object, str]:
    """(path, marker, what the dialog must name) of a .pt2 with a compiled library or a TorchScript writer."""
    import torch
    from torch import nn

    marker = tmp_path / f"{kind}.marker"
    if kind == "aoti":
        if GCC is None:
            pytest.skip("needs gcc to build the fake AOTInductor library")
        base = tmp_path / "base.pt2"
        torch.export.save(torch.export.export(nn.Linear(4, 3).eval(), (torch.randn(2, 4),)), base)
        return _aoti_pt2(tmp_path, str(base), marker), marker, "native library data/aotinductor/model/evil.so"
    return from_file_archive(tmp_path, marker), marker, "TorchScript code ("


@pytest.mark.parametrize("kind", ["aoti", "torchscript"])
def test_showing_the_run_tab_runs_nothing_and_running_asks_first(kind, qtbot, tmp_path, monkeypatch) -> None:
    from ckptview.core.run import request as runner
    from ckptview.gui.base.workers import wait_for_workers
    from ckptview.gui.panels.run import RunPanel, consent_text

    path, marker, named = _hostile(kind, tmp_path)
    started: list[object] = []
    monkeypatch.setattr(runner, "execute", lambda *a, **k: started.append(a) or iter(()))
    asked: list[list[tuple[str, list[str]]]] = []
    panel = RunPanel(path=path, devices=list_devices(), confirm_trust=lambda items: asked.append(items) or False)
    qtbot.addWidget(panel)
    assert "loading it runs code from the file" in panel.source_label.text()
    panel.show()
    qtbot.waitUntil(lambda: panel._inspect is not None)  # the signature is read off the GUI thread
    assert wait_for_workers(60_000)
    if kind == "aoti":  # read from the program's JSON, not by loading it
        qtbot.waitUntil(lambda: panel.input_edit.text().endswith("2,4@float32=normal"))  # named as the program names it
    assert started == [] and not marker.exists()
    panel.input_edit.setText("2,4")
    with qtbot.waitSignal(panel.runFailed) as blocker:
        assert panel.start_run() is False
    assert blocker.args[0] == "not run: the file was not trusted"
    ((asked_path, found),) = asked[0]
    assert asked_path == path and any(f.startswith(named) for f in found)
    assert named in consent_text(asked[0])
    assert started == [] and not marker.exists()


def test_the_window_shows_a_compiled_library_as_native_code(qtbot, tmp_path) -> None:
    """Finding 1 in the window: the checkpoint tab's banner names the library."""
    from PySide6.QtWidgets import QLabel

    from ckptview.core import open_checkpoint
    from ckptview.gui.checkpoint.pages import safety_banner

    path, marker, _ = _hostile("aoti", tmp_path)
    checkpoint = open_checkpoint(path)
    try:
        banner = safety_banner(checkpoint)
        assert banner is not None
        qtbot.addWidget(banner)
        text = " ".join(label.text() for label in banner.findChildren(QLabel))
        assert "native code: data/aotinductor/model/evil.so (a compiled library" in text
    finally:
        checkpoint.close()
    assert not marker.exists()
