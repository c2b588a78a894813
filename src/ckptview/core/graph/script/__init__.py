"""TorchScript code read as a graph, never run: its `code/` records parsed (`code`), the names they use
(`values`), which calls are tensor operations (`ops`), and the walk that inlines every call (`evaluate`)."""

from __future__ import annotations

from ckptview.core.graph.script.code import ScriptCode
from ckptview.core.graph.script.evaluate import ScriptGraph

__all__ = ["ScriptCode", "ScriptGraph"]
