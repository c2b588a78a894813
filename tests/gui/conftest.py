"""GUI fixtures: a window with its own settings file and server name, and small checkpoints made with torch."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.support.guihelpers import make_state_dict

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

_GUI_DIR = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    """Every test under tests/gui drives Qt: it carries the `gui` marker whether or not its module says so
    (`-m "not gui"` must leave out all of them, also a new file that forgets the marker)."""
    for item in items:
        if os.path.abspath(str(item.fspath)).startswith(_GUI_DIR + os.sep):
            item.add_marker(pytest.mark.gui)


@pytest.fixture
def state_dict_file(tmp_path) -> str:
    return make_state_dict(str(tmp_path / "model.pth"))


@pytest.fixture
def settings(tmp_path):
    from ckptview.gui.base.settings import Settings

    return Settings(str(tmp_path / "settings.ini"))


@pytest.fixture
def server_name() -> str:
    return f"ckptview-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def window(qtbot, settings):
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.workers import wait_for_workers

    win = MainWindow(settings)
    qtbot.addWidget(win)
    win.show()
    yield win
    wait_for_workers(10_000)


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item):
    """A test's background jobs finish, and their results arrive, inside the test while its widgets live.

    pytest-qt closes the widgets before fixtures tear down; a result arriving later (or in the next test)
    would reach a deleted view. trylast: inside pytest-qt's wrapper, so an exception here fails this test.
    """
    yield
    if "qtbot" in getattr(item, "fixturenames", ()):
        from PySide6.QtWidgets import QApplication

        from ckptview.gui.base.workers import wait_for_workers

        wait_for_workers(30_000)
        QApplication.processEvents()  # deliver their queued signals now


@pytest.fixture(autouse=True)
def _no_real_server(monkeypatch, server_name):
    # Never talk to a ckptview the developer has open.
    monkeypatch.setenv("CKPTVIEW_SERVER_NAME", server_name)
    yield
    os.environ.pop("CKPTVIEW_SERVER_NAME", None)
