"""A tab's parameter orders, learned after its tree is shown.

A Trainer folder's model file stores names sorted, so its optimizer's state is named by a guess of the
model's order, marked "(guessed)" in every view, unless the parameter orders the window keeps (its
workspace's `ParamOrderCache`) know the order of the model its config.json names. When they do not, the
tab opens at once anyway and `OrderLearner` has the order learned in the background (the library's model
built on the meta device in a worker process: seconds), then the tree's labels and the panels that follow
it (`FollowsParameterOrder`) name the state for sure. The cache keeps it for every later open.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal

from ckptview.core.inspect.order_cache import ParamOrderCache
from ckptview.core.session.opening import Opened, learn_orders
from ckptview.gui.base.workers import JobSlot

__all__ = ["OrderLearner"]
log = logging.getLogger(__name__)


class OrderLearner(QObject):
    """Learns the parameter orders an opened checkpoint waits for, in the waiting pool; `arrived` when done."""

    arrived = Signal(object)  # how many orders were learned (0: the library could not tell them)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.slot = JobSlot(self, waits=True)  # it waits on a worker process, never holds a figures thread
        self.slot.returned.connect(self.arrived)
        self.slot.errored.connect(lambda exc: log.warning("learning a parameter order failed: %s", exc))

    def start(self, opened: Opened, orders: ParamOrderCache | None) -> str | None:
        """Learn what `opened` waits for into `orders`; the model classes asked of (None: nothing to learn)."""
        if orders is None or not opened.pending:
            return None
        self.slot.start(learn_orders, opened, orders)
        return ", ".join(f"{r.arch} ({r.library})" for r in opened.pending)

    @property
    def running(self) -> bool:
        return self.slot.running

    def stop(self) -> None:
        """Stop waiting: a result that still arrives is dropped (the child ends by its own time limit)."""
        self.slot.cancel()
