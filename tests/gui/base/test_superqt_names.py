"""gui/base/workers.py leans on private parts of superqt (its module loaded by path, to keep `import superqt`'s
widgets off the window's start; four private names of `GeneratorWorker`). pyproject.toml bounds superqt to the
releases this test holds: a release that renames one of them fails here, not in a user's window."""

from __future__ import annotations

import importlib.util
import inspect
import os

from ckptview.gui.base.workers import SuperqtGeneratorWorker, superqt_threading

SIGNAL = type(superqt_threading().WorkerBaseSignals.started)


def test_the_private_module_is_where_workers_loads_it_from() -> None:
    spec = importlib.util.find_spec("superqt")
    assert spec is not None and spec.origin is not None
    assert os.path.isfile(os.path.join(os.path.dirname(spec.origin), "utils", "_qthreading.py"))
    assert superqt_threading().GeneratorWorker is SuperqtGeneratorWorker


def test_the_private_names_workers_uses_exist() -> None:
    assert isinstance(SuperqtGeneratorWorker._worker_set, set)
    assert callable(SuperqtGeneratorWorker._set_discard)
    # `_finished` is a signal of the worker's signals object, which the worker's __getattr__ passes through.
    assert isinstance(superqt_threading().WorkerBaseSignals._finished, SIGNAL)
    assert "__getattr__" in vars(superqt_threading().WorkerBase)
    assert "abort_requested" in dir(SuperqtGeneratorWorker)
    # `_gen` is the generator the worker drives, set by its constructor from the function and arguments.
    assert "self._gen" in inspect.getsource(SuperqtGeneratorWorker.__init__)
