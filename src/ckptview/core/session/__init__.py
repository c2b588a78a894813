"""What a window or a command holds open: the workspace of shared checkpoints, opening in a worker,
checks of a path before it is opened, what an open that failed offers instead (`offers`), and titles that
tell open files of one name apart (`titles`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.session.opening import Opened, open_and_prepare
    from ckptview.core.session.workspace import Holdings, Lease, Workspace

__all__ = ["Holdings", "Lease", "Opened", "Workspace", "open_and_prepare"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "opening": ["Opened", "open_and_prepare"],
    "workspace": ["Holdings", "Lease", "Workspace"],
})
