"""A panel's running job as a person sees it: a progress bar that moves and a Cancel button, shown while the
panel's `JobSlot` is busy and hidden when it is idle (so an idle panel's layout is what it was).

The bar follows the job's `Progress`: its fraction when the job knows its total, a busy indicator when it does
not (a factorisation that LAPACK does in one call: the job's message then says the seconds it has run). Cancel
asks the slot to stop (`JobSlot.stop`): the core's loops look at the token between bounded steps, so the job
ends within a fraction of a second and the slot forwards `aborted`; `cancelled` is emitted at once, for the
panel to say so in its own words.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QWidget

from ckptview.core.jobs import Progress
from ckptview.gui.base.workers import JobSlot

STEPS = 1000
SHOW_AFTER_MS = 200  # a job shorter than this shows no bar


class JobBar(QWidget):
    """Progress and Cancel of `slot`'s jobs, visible while one runs; after a Cancel, a Compute button that
    starts the work again (the panel's `retry`), until the next job starts."""

    cancelled = Signal()  # the user pressed Cancel
    retry = Signal()  # the user pressed Compute (after a Cancel): the panel starts its job again

    def __init__(self, slot: JobSlot, parent: QWidget | None = None, width: int = 140, steps: bool = True) -> None:
        """`steps`: the jobs yield `Progress` with a total (False: a busy indicator from the start, for jobs
        that report nothing, such as the values table's tiles)."""
        super().__init__(parent)
        self.slot = slot
        self.steps = steps
        self.progress = QProgressBar()
        self.progress.setRange(0, STEPS)
        self.progress.setTextVisible(False)
        self.progress.setMaximumWidth(width)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop computing (what is done so far stays)")
        self.retry_button = QPushButton("Compute")
        self.retry_button.setToolTip("Compute what was cancelled")
        self.retry_button.hide()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.progress)
        layout.addWidget(self.cancel_button)
        layout.addWidget(self.retry_button)
        self.cancel_button.clicked.connect(self.cancel)
        self.retry_button.clicked.connect(self._retry)
        self._offer_retry = False
        # Shown once a job has run SHOW_AFTER_MS (a quick one never flickers it), hidden when none runs; both
        # from the event loop, never inside the paint that started a job (the values table's tiles).
        self._show_timer = QTimer(self)
        self._show_timer.setSingleShot(True)
        self._show_timer.setInterval(SHOW_AFTER_MS)
        self._show_timer.timeout.connect(lambda: self._on_busy(self.slot.running, now=True))
        slot.busy.connect(self._on_busy, Qt.ConnectionType.QueuedConnection)
        slot.yielded.connect(self._on_yielded)
        self.setVisible(False)

    def cancel(self) -> None:
        """Ask the running jobs to stop (the slot forwards their `aborted`)."""
        if self.slot.running:
            self._offer_retry = True
            self.slot.stop()
            self.cancelled.emit()

    def _retry(self) -> None:
        self._offer_retry = False
        self._show(busy=False)
        self.retry.emit()

    def _on_busy(self, busy: bool, now: bool = False) -> None:
        busy = busy and self.slot.running
        if busy and not now:
            self._offer_retry = False
            if not (self.isVisible() and self.cancel_button.isVisible()):
                self.progress.setRange(0, STEPS if self.steps else 0)
                self.progress.setValue(0)
                self._show_timer.start()
            return
        self._show_timer.stop()
        self._show(busy)

    def _show(self, busy: bool) -> None:
        """Progress and Cancel while busy; Compute alone when idle after a Cancel; nothing otherwise."""
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.retry_button.setVisible(not busy and self._offer_retry)
        self.setVisible(busy or self._offer_retry)

    def _on_yielded(self, value: object) -> None:
        if not isinstance(value, Progress):
            return
        if value.total <= 0:
            self.progress.setRange(0, 0)  # a busy indicator: the job does not know how far it is
        else:
            self.progress.setRange(0, STEPS)
            self.progress.setValue(int(value.fraction * STEPS))
