"""What launching the window and opening a file cost the GUI thread: no collection over the tree being
built, and no plotting or array library imported before a plot or values are needed."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest

from tests.support.guihelpers import make_state_dict, wait_settled

LAUNCH_TIMING = next(p for p in Path(__file__).resolve().parents if (p / "benchmarks").is_dir()) / "benchmarks" / "launch_timing.py"


@pytest.fixture
def collections():
    """The generations the cyclic collector ran on, as they happen (gc.callbacks)."""
    seen: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)


def _pile_up_young_objects() -> list:
    """Enough fresh containers that every generation's threshold is crossed."""
    return [[i] for i in range(50 * max(gc.get_threshold()))]


def test_no_collection_while_a_tab_opens_its_file(qtbot, window, tmp_path, monkeypatch, collections):
    import ckptview.gui.checkpoint.opener as tab_opener
    from ckptview.gui.base import gc_guard

    real = tab_opener.open_and_prepare
    inside, release = threading.Event(), threading.Event()

    def slow_open(path, header_limit=None):
        opened = real(path, header_limit)
        inside.set()  # the tree is built, not frozen yet: what a collection would walk for nothing
        assert release.wait(60)
        return opened

    monkeypatch.setattr(tab_opener, "open_and_prepare", slow_open)
    (tab,) = window.open_paths([make_state_dict(str(tmp_path / "model.pth"))])
    assert inside.wait(60)
    young = _pile_up_young_objects()
    del collections[:]
    for _ in range(3):
        gc_guard._guard.check()  # the guard's timer, ticking while the worker holds the new tree
    assert collections == []
    release.set()
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    young += _pile_up_young_objects()  # the open froze what existed: these are new
    gc_guard._guard.check()  # the open is over: the guard collects again
    assert collections and collections[0] == 0
    del young


def test_a_stuck_open_holds_collections_off_only_for_a_while(qtbot, window, monkeypatch, collections):
    from ckptview.core.gc_policy import paused_gc
    from ckptview.gui.base import gc_guard

    guard = gc_guard._guard
    with paused_gc():  # as a worker opening a file on a dead mount would, forever
        young = _pile_up_young_objects()
        del collections[:]
        guard.check()
        assert collections == []
        monkeypatch.setattr(gc_guard, "MAX_DEFER_S", 0.0)  # ...until the deferral's bound has passed
        guard.check()
        assert collections and collections[0] == 0
    del young


def test_launch_to_tree_imports_no_plotting_or_array_library(tmp_path):
    """A big checkpoint (side panels built on demand): its tree shows before numpy, pyqtgraph or torch load,
    and before superqt's widgets (the workers take superqt's thread module only)."""
    import json
    import subprocess
    import sys

    import torch

    path = tmp_path / "wide.pt"
    torch.save({f"blocks.{i // 10}.part{i % 10}.weight": torch.zeros(2) for i in range(20_010)}, path)
    out = subprocess.run([sys.executable, str(LAUNCH_TIMING), str(path)], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["state"] == "ready" and result["tensors"] == 20_010 and result["rows_shown"] == 1
    assert not result["torch_imported"] and not result["numpy_imported"] and not result["pyqtgraph_imported"]
    assert not result["superqt_widgets_imported"]
    parts = ("startup_seconds", "read_seconds", "prepare_seconds", "build_seconds")
    assert all(result[p] >= 0 for p in parts)
    assert result["seconds"] >= sum(result[p] for p in parts) - 0.01  # the parts follow each other
    assert result["gui_seconds"] == pytest.approx(result["seconds"] - result["read_seconds"], abs=0.002)


def test_size_chart_names_each_module_with_its_size(qtbot, window, tmp_path):
    (tab,) = window.open_paths([make_state_dict(str(tmp_path / "model.pth"))])
    wait_settled(qtbot, tab)
    chart = tab.summary.chart
    assert chart.objectName() == "sizeChart" and chart.isVisible()
    expected = {"encoder": 8 * 16 * 4 * 2 + 8 * 4 + 32 * 16 * 2 + 768 * 16 * 2, "decoder": 100 * 16 * 4,
                "lm_head": 100 * 16 * 4, "step": 8}
    assert dict(chart.bars) == expected
    from ckptview.core.units import human_bytes

    assert chart.labels()[0] == f"encoder  {human_bytes(expected['encoder'])}"  # largest first
    assert not chart.grab().isNull()


def test_size_chart_shows_hostile_names_escaped(qtbot):
    from ckptview.gui.base.size_chart import SizeChart, short_name

    chart = SizeChart([("evil\u202e\nname", 10), ("x" * 100, 5)])
    qtbot.addWidget(chart)
    assert all("\u202e" not in label and "\n" not in label for label in chart.labels())
    assert short_name("x" * 100).startswith("…") and len(short_name("x" * 100)) == 28
    assert "\u202e" not in chart.toolTip()
    assert not chart.grab().isNull()


def test_expanders_follow_the_filter(qtbot, window, tmp_path):
    """A matched group whose children all fail the filter shows no expander; without a filter it does."""
    from ckptview.core.inspect.grouping import find_row

    (tab,) = window.open_paths([make_state_dict(str(tmp_path / "model.pth"))])
    wait_settled(qtbot, tab)
    model = tab.model
    group = find_row(tab.top, "encoder.layers.1")
    assert model.hasChildren(model.index_of(group))
    tab.filter_edit.setText(r"/layers\.1$/")
    tab.apply_filter()
    index = model.index_of(group)
    assert index.isValid() and not model.hasChildren(index) and model.rowCount(index) == 0
    assert model.hasChildren(model.index_of(find_row(tab.top, "encoder.layers")))
    tab.filter_edit.setText("")
    tab.apply_filter()
    assert model.hasChildren(model.index_of(group)) and model.rowCount(model.index_of(group)) == 2
