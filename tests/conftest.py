"""Shared fixtures. Qt runs offscreen in every test; checkpoints are made with torch in tmp_path."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
# The series cache (platformdirs' user cache folder) goes to a folder of this session, never the user's.
_CACHE_HOME = __import__("tempfile").mkdtemp(prefix="ckptview-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME
__import__("atexit").register(__import__("shutil").rmtree, _CACHE_HOME, True)


@pytest.fixture
def transformers_unimported(monkeypatch):
    """transformers out of sys.modules for this test (restored after): a test that checks ckptview never
    imports it must not depend on whether an earlier test imported it for a reference."""
    import sys

    for name in [n for n in sys.modules if n == "transformers" or n.startswith("transformers.")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem) -> None:
    """A library that adds a `logging.StreamHandler()` when it is imported (lightning does) binds whatever
    `sys.stderr` was then: imported during a test that captures output, it holds that test's stream, closed
    once the test ends, and every later record prints "--- Logging error ---" into another test's output. Such
    a handler is pointed back at the process's own stderr, so no test depends on which test imported what."""
    import logging
    import sys

    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                       if isinstance(v, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
                handler.stream = sys.__stderr__  # not setStream: it flushes the closed stream first
