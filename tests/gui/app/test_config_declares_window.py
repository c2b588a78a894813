"""The window on a config that does not describe its file (issue 43, findings 9 and 10): the Run panel builds
and says why in one line, the Graph tab draws what the keys say (inferred
or the module tree) naming the refusal, no worker is started, and
nothing logs "panel 'Run' failed to build". The folders are tests/hostile/test_config_declares.py's."""

from __future__ import annotations

import pytest

from tests.support.declared_configs import WORDS, block_workers, hostile, save_models

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_models(tmp_path_factory.mktemp("declares"))


@pytest.fixture
def no_worker(monkeypatch) -> None:
    block_workers(monkeypatch)


@pytest.mark.parametrize("case", ["layers", "size", "deep"])
def test_the_run_panel_says_why_in_one_line(saved, tmp_path, qtbot, no_worker, case):
    from ckptview.core.worker.device_probe import list_devices
    from ckptview.gui.panels.run import RunPanel

    folder = hostile(saved, tmp_path, "llama", case)
    panel = RunPanel(path=str(folder), devices=list_devices())
    qtbot.addWidget(panel)
    panel.show()
    text = panel.source_label.text()
    assert WORDS[case] in text and "\n" not in text, text
    assert not panel.start_run()


@pytest.mark.parametrize("case", ["layers", "deep"])
def test_the_window_builds_its_panels_and_draws_from_the_keys(saved, tmp_path, qtbot, window, no_worker, case,
                                                              caplog):
    from tests.support.guihelpers import wait_settled

    folder = hostile(saved, tmp_path, "llama", case)
    tab = window.open_paths([str(folder)])[0]
    wait_settled(qtbot, tab)
    assert tab.show_panel("Run") is not None
    assert not [r for r in caplog.records if "failed to build" in r.getMessage()]
    page = tab.show_graph(True)
    qtbot.waitUntil(lambda: page.hierarchy is not None, timeout=60_000)
    graph = page.hierarchy.graph
    assert graph.source in ("inferred", "module-tree") and WORDS[case] in graph.notes[0], graph.notes
