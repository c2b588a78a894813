"""TorchScript code read as a graph, never run: its `code/` records parsed (`code`), the names they use
(`values`), which calls are tensor operations (`ops`), and the walk that inlines every call (`evaluate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.graph.script.code import ScriptCode
    from ckptview.core.graph.script.evaluate import ScriptGraph

__all__ = ["ScriptCode", "ScriptGraph"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "code": ["ScriptCode"],
    "evaluate": ["ScriptGraph"],
})
