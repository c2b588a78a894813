"""A TorchScript archive's graph, from its `code/` records parsed as text and its module tree (nothing run).

The module tree, class names and constants come from `data.pkl` and `constants.pkl` as the safe VM read them
at open (the checkpoint's tree); the code records are read through the same archive and parsed with `ast`
(`script.code`), then walked with every call inlined (`script.evaluate`). Node ops are named as torch's inlined
graph names them, without overloads (`aten.linear`): the code does not say which overload runs.
"""

from __future__ import annotations

from collections.abc import Generator

from ckptview.core.budget import Budget
from ckptview.core.checkpoint import Checkpoint
from ckptview.core.graph.model import ModelGraph
from ckptview.core.graph.placing import unread_keys
from ckptview.core.graph.script.code import ScriptCode
from ckptview.core.graph.script.evaluate import ScriptGraph
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.formats.torch_zip import opened_archive

SOURCE = "torchscript"
SUBJECT = "the TorchScript code"


def torchscript_graph(checkpoint: Checkpoint, token: CancelToken | None = None
                      ) -> Generator[Progress, None, ModelGraph]:
    """The graph of an opened TorchScript archive (format `torchscript`): its work charged to one budget of
    the file's stored bytes (`BudgetExceeded` past it), which looks at `token` as it is charged."""
    yield Progress(0, 0, "reading the TorchScript code")
    root = checkpoint.root
    constants = next((c for c in root.children if c.key == "__constants__"), None)
    budget = Budget.for_stored(checkpoint.file_size, SUBJECT, cancel=token)
    walk = ScriptGraph(ScriptCode(opened_archive(checkpoint), budget), root, constants, budget)
    walk.forward()
    graph = ModelGraph(SOURCE, walk.nodes, notes=list(walk.notes))
    graph.unread = unread_keys(graph, (e.name for e in checkpoint.tensors()))
    native = checkpoint.metadata.get("native_code") or []
    if native:
        graph.notes.append(f"native code present: {', '.join(str(n) for n in native[:3])} (never loaded)")
    yield Progress(1, 1, "read the TorchScript code")
    return graph
