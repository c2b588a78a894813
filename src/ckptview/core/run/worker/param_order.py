"""The child process of `core.inspect.hf_order`: a Hugging Face model built on the meta device (no weights,
no memory) by the installed transformers, its `named_parameters()` printed as one JSON line.

`python -I` with the bootstrap of `core.run.child.child_command`, offline, in a private folder: only the
installed library's code runs (the parent refuses a config that asks for code of its own).
"""

from __future__ import annotations

import json
import sys
import warnings


def entry() -> None:
    """argv: the model folder, the class named by its config.json's `architectures[0]`."""
    warnings.simplefilter("ignore")
    import torch
    import transformers

    folder, arch = sys.argv[-2], sys.argv[-1]
    config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=False, local_files_only=True)
    cls = getattr(transformers, arch)
    with torch.device("meta"):
        model = cls(config)
    print(json.dumps([name for name, _ in model.named_parameters()]))
