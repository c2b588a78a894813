"""The series tab's Follow switch, driven with qtbot while a writer adds, renames and deletes checkpoints."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest
import torch
from PySide6.QtCore import Qt

from ckptview.gui.series.follow import Follow
from ckptview.gui.series.tab import SeriesTab


def _state(step: int) -> dict:
    torch.manual_seed(step)
    return {"model": {"w": torch.randn(32, 32), "b": torch.randn(32)}, "global_step": step}


def _bytes(step: int) -> bytes:
    buf = io.BytesIO()
    torch.save(_state(step), buf)
    return buf.getvalue()


def test_follow_adds_new_checkpoints_and_keeps_gone_ones(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(Follow, "settle", 0.3)
    run = tmp_path / "run"
    run.mkdir()
    (run / "step_1.pt").write_bytes(_bytes(1))
    (run / "step_2.pt").write_bytes(_bytes(2))
    tab = SeriesTab([str(run)])
    qtbot.addWidget(tab)
    tab.show()
    qtbot.waitExposed(tab)
    with qtbot.waitSignal(tab.finished, timeout=120_000):
        tab.start()
    updates: list[list[dict]] = []
    tab.follow.updated.connect(updates.append)
    qtbot.mouseClick(tab.follow_box, Qt.MouseButton.LeftButton)
    assert tab.follow_box.isChecked() and tab.follow.following()
    qtbot.waitUntil(lambda: len(updates) >= 1, timeout=120_000)
    assert [e["event"] for e in updates[0]] == ["added", "added"]

    def writer() -> None:
        data = _bytes(3)
        with open(run / "step_3.pt", "wb") as fh:  # in pieces
            for k in range(4):
                fh.write(data[k * len(data) // 4:(k + 1) * len(data) // 4])
                fh.flush()
                time.sleep(0.05)
        (run / "step_4.pt.tmp").write_bytes(_bytes(4))
        os.replace(run / "step_4.pt.tmp", run / "step_4.pt")  # renamed into place

    thread = threading.Thread(target=writer)
    thread.start()
    qtbot.waitUntil(lambda: tab.result is not None and len(tab.result.checkpoints) == 4, timeout=120_000)
    thread.join(timeout=120)
    w = tab.result.tensors["model.w"]
    expected = _state(4)["model"]["w"].double()
    assert w.figure("norm")[3] == pytest.approx(float(expected.norm()), rel=1e-12)
    prev = _state(3)["model"]["w"].double()
    assert w.update_ratio[3] == pytest.approx(float((expected - prev).norm() / prev.norm()), rel=1e-9)
    assert "4 checkpoints" in tab.summary_label.text()

    os.remove(run / "step_1.pt")
    qtbot.waitUntil(lambda: "1 gone" in tab.summary_label.text(), timeout=120_000)
    assert len(tab.result.checkpoints) == 4  # kept in the timeline
    added = [os.path.basename(e["checkpoint"]["path"]) for u in updates for e in u if e["event"] == "added"]
    assert sorted(added) == ["step_1.pt", "step_2.pt", "step_3.pt", "step_4.pt"]  # each once

    qtbot.mouseClick(tab.follow_box, Qt.MouseButton.LeftButton)
    assert not tab.follow_box.isChecked()
    qtbot.waitUntil(lambda: not tab.follow.following(), timeout=60_000)
