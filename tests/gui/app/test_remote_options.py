"""The window reads URLs with the remote options of its command line (`ckptview --download URL`): its
workspace carries them to a URL's tab, and to a series tab of URLs (its listing, its opens, its reading)."""

from __future__ import annotations

import pytest
import torch

from ckptview.cli import window_args
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.gui.app.launch import launch
from ckptview.gui.base.workers import wait_for_workers
from tests.support.guihelpers import wait_settled
from tests.support.remote_server import RangeServer

pytest.importorskip("fsspec")
pytest.importorskip("requests")


@pytest.fixture(scope="module")
def no_range(tmp_path_factory):
    """A server that ignores Range, over a run of two checkpoints."""
    root = tmp_path_factory.mktemp("served")
    (root / "run").mkdir()
    for step in (1, 2):
        torch.save({"w": torch.full((64,), float(step)), "step": step}, root / "run" / f"step-{step}.pt")
    server = RangeServer(str(root), honour_range=False)
    yield server
    server.stop()


def test_the_window_parses_the_remote_flags_with_its_own():
    args = window_args(["--download", "--deadline", "9", "a.pt"])
    assert args.remote == RemoteOptions(download=True, deadline=9.0) and args.paths == ["a.pt"]


def test_a_url_tab_and_a_series_tab_read_with_the_windows_options(qtbot, settings, server_name, no_range):
    urls = [f"{no_range.url}/run/step-{step}.pt" for step in (1, 2)]
    window = launch(window_args(["--new-instance", "--download", urls[0]]), settings, server_name)
    assert window is not None
    qtbot.addWidget(window)
    tab = window.current_tab()
    wait_settled(qtbot, tab, timeout=60_000)
    assert tab.state == "ready"
    series = window.open_series([f"{no_range.url}/run/"])
    qtbot.waitUntil(lambda: series.state != "loading", timeout=120_000)
    assert series.state == "ready", series.summary_label.text()
    result = series.result
    assert [c.error for c in result.checkpoints] == [None, None]
    assert [c.position.step for c in result.checkpoints] == [1, 2]
    wait_for_workers(10_000)
