"""The child process of `core.inspect.hf_order`: a Hugging Face model built on the meta device (no weights,
no memory) by the installed transformers, its `named_parameters()` printed as one JSON line.

`python -I` with the bootstrap of `core.run.child.child_command`, offline, in a private folder. The request
on stdin is the config the parent read as data and checked (`core.run.config_guard`) and the model class it
names; the build is the run worker's own (`library.parameter_names`: the config checked again, a model class
of the library only, what the build opens guarded), so no path is handed to the library.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings

from ckptview.core.run.declared_sizes import Listing
from ckptview.core.worker.library import parameter_names
from ckptview.core.worker.lifeline import leave


def entry() -> None:
    """stdin: {"class": the model class, "config": the checked config, "expect": the checkpoint's listing};
    stdout: the names, one JSON line."""
    warnings.simplefilter("ignore")
    status = 1
    try:
        request = json.loads(sys.stdin.read())
        listing = Listing.from_json(request.get("expect"))  # the checkpoint it is for: the build held against it
        print(json.dumps(parameter_names(request["config"], request["class"], listing)))
        status = 0
    except Exception:  # noqa: BLE001 - no order: the parent reads the status, stderr says why
        traceback.print_exc()
    finally:
        leave(status)  # its scratch folder goes with it (lifeline)
