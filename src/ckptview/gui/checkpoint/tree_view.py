"""The tree of a checkpoint tab: the view over `CheckpointTreeModel`, its columns fitted to the width, and
its context menu."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from PySide6.QtCore import QEvent, QModelIndex, QPoint, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QAbstractItemView, QMenu, QTreeView

from ckptview.core.text import shown
from ckptview.core.units import shape_text
from ckptview.gui.base.elide import ElidingDelegate, elide_label, elide_to_number
from ckptview.gui.checkpoint.tree_model import (
    DEVICE,
    DTYPE,
    NAME,
    PARAMS,
    SHAPE,
    SHARD,
    SIZE,
    CheckpointTreeModel,
)

__all__ = ["COLUMN_SAMPLES", "COLUMN_WIDTHS", "CheckpointTreeView"]
COLUMN_WIDTHS = (300, 110, 80, 80, 95, 64, 220)
# Typical content per column: what a column keeps room for before it elides (see fit_columns).
COLUMN_SAMPLES = {SHAPE: "1024 × 1024", DTYPE: "bfloat16", SIZE: "99.9 MiB", PARAMS: "1,048,576",
                  DEVICE: "cuda:0", SHARD: "…00001-of-00002.safet"}


class CheckpointTreeView(QTreeView):
    """Rows of a checkpoint: names first, file order until a header is clicked, a menu to copy."""

    status_message = Signal(str)

    def __init__(self, model: CheckpointTreeModel, sharded: bool, devices: AbstractSet[str]) -> None:
        super().__init__()
        self.tree_model = model
        self.setObjectName("checkpointTree")
        self.setModel(model)
        self.setUniformRowHeights(True)  # lets the view skip measuring 100,000 rows
        self.setAlternatingRowColors(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._context_menu)
        header = self.header()
        header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # file order until a header is clicked
        header.setSortIndicatorClearable(True)  # a third click returns to file order
        self.setSortingEnabled(True)
        header.setStretchLastSection(False)
        header.setMinimumSectionSize(40)
        # Names matter most: long ones are cut in the middle (both the module and the leaf stay), and the
        # Name column keeps at least half the width; the other columns give way first (fit_columns).
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        # Optimizer rows keep "exp_avg of" and cut the parameter's name in the middle; shard names keep
        # their number. Every cell's whole text is in its tooltip.
        self.setItemDelegateForColumn(NAME, ElidingDelegate(elide_label, self))
        self.setItemDelegateForColumn(SHARD, ElidingDelegate(elide_to_number, self))
        # The shard column only means something for sharded folders and DCP checkpoints.
        self.setColumnHidden(SHARD, not sharded)
        # Where tensors were saved says something only when it is not the CPU for all of them.
        self.setColumnHidden(DEVICE, devices <= {"cpu"})

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Refit the columns when the viewport is resized."""
        if event.type() == QEvent.Type.Resize:
            self.fit_columns()
        return super().viewportEvent(event)

    def fit_columns(self) -> None:
        """Name keeps at least 40% of the width; the other columns give way first: down to the width of
        typical content, then (on a very narrow tree) down to their captions, which are never clipped."""
        header = self.header()
        metrics = header.fontMetrics()
        width = self.viewport().width()
        shown_columns = [c for c in range(len(COLUMN_WIDTHS)) if c != NAME and not self.isColumnHidden(c)]
        caption = {c: metrics.horizontalAdvance(str(self.tree_model.headerData(c, Qt.Orientation.Horizontal))) + 16
                   for c in shown_columns}
        content = {c: max(caption[c], metrics.horizontalAdvance(COLUMN_SAMPLES.get(c, "")) + 16)
                   for c in shown_columns}
        wanted = {c: max(COLUMN_WIDTHS[c], content[c]) for c in shown_columns}
        room = width - max(int(width * 0.4), min(COLUMN_WIDTHS[NAME], width - sum(wanted.values())))
        sizes = caption
        for low, high in ((content, wanted), (caption, content)):  # the first level that fits wins
            spare = sum(high[c] - low[c] for c in shown_columns)
            if room >= sum(low.values()):
                squeeze = min(1.0, (room - sum(low.values())) / spare) if spare else 1.0
                sizes = {c: low[c] + int((high[c] - low[c]) * squeeze) for c in shown_columns}
                break
        for c in shown_columns:
            header.resizeSection(c, sizes[c])
        header.resizeSection(NAME, max(header.minimumSectionSize(), width - sum(sizes.values())))

    def build_context_menu(self, index: QModelIndex) -> QMenu:
        """The context menu for `index` (tests trigger its actions directly)."""
        menu = QMenu(self)
        row = self.tree_model.row_of(index) if index.isValid() else None
        copy_name = menu.addAction("Copy name", lambda: self.copy_text(row.name if row else ""))
        copy_name.setEnabled(row is not None)
        info = row.node.tensor if row is not None and row.node is not None else None
        copy_shape = menu.addAction("Copy shape", lambda: self.copy_text(str(list(info.shape)) if info else ""))
        copy_shape.setEnabled(info is not None)
        if info is not None:
            copy_shape.setToolTip(shape_text(info.shape))
        menu.addSeparator()
        menu.addAction("Expand all", self.expandAll)
        menu.addAction("Collapse all", self.collapseAll)
        return menu

    def copy_text(self, text: str) -> None:
        """Put `text` on the clipboard."""
        QGuiApplication.clipboard().setText(text)
        self.status_message.emit(f"Copied {shown(text)}")  # the whole text on the clipboard, a bounded line shown

    def _context_menu(self, pos: QPoint) -> None:
        menu = self.build_context_menu(self.indexAt(pos))
        menu.exec(self.viewport().mapToGlobal(pos))
