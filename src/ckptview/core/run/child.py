"""The command line of an isolated child of this interpreter (`python -I`), which imports ckptview from this
process's own package folder and runs one module of `core.worker`: the forward pass's worker, the Hub
parameter-order child. Kept apart from `process.py` so that a caller that only starts a child (inspect's
Hub parameter order) does not import the worker protocol and the run's results."""

from __future__ import annotations

import os
import sys

import ckptview

__all__ = ["OFFLINE_ENV", "child_command"]

# No network for a library build in a child (the Hub libraries read these when first imported).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DIFFUSERS_OFFLINE": "1",
               "HF_HUB_DISABLE_TELEMETRY": "1"}

_BOOTSTRAP = (
    "import sys, importlib, importlib.util as u\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
    "s = u.spec_from_file_location('ckptview', sys.argv[1] + '/__init__.py', "
    "submodule_search_locations=[sys.argv[1]])\n"
    "m = u.module_from_spec(s); sys.modules['ckptview'] = m; s.loader.exec_module(m)\n"
    "importlib.import_module(sys.argv[2]).entry()\n"
)

def child_command(module: str, *args: str) -> list[str]:
    """The command line that runs `module.entry()` (a module of `core.worker`) in an isolated process of
    this interpreter, with `args` after it on its argv."""
    package = os.path.dirname(os.path.abspath(ckptview.__file__))
    return [sys.executable, "-I", "-u", "-X", "faulthandler", "-c", _BOOTSTRAP, package, module, *args]
