"""What a window or a command holds open: the workspace of shared checkpoints, opening in a worker,
checks of a path before it is opened."""

from __future__ import annotations

from ckptview.core.session.opening import Opened, open_and_prepare
from ckptview.core.session.workspace import Holdings, Lease, Workspace

__all__ = ["Holdings", "Lease", "Opened", "Workspace", "open_and_prepare"]
