"""The tree of a checkpoint tab: the view over `CheckpointTreeModel`, its columns fitted to the width, and
its context menu."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from PySide6.QtCore import QEvent, QModelIndex, QPoint, QRect, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QMenu,
    QStyle,
    QStyleOptionHeader,
    QStyleOptionViewItem,
    QTreeView,
)

from ckptview.core.text import shown
from ckptview.core.units import shape_text
from ckptview.gui.base.elide import ElidingDelegate, elide_label, elide_to_number
from ckptview.gui.checkpoint.tree_model import DEVICE, NAME, SHARD, CheckpointTreeModel

__all__ = ["NAME_KEEPS", "CheckpointTreeView"]
NAME_KEEPS = 140  # pixels the Name column keeps before the other columns give way (down to their captions)
NAME_WANTS = 240  # pixels the tab's splitter gives the Name column at first, beside the other columns
INDENT = 14  # pixels per level: a Llama leaf is six levels down (Qt's 20 took 120 px of its Name cell)


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
        header.setMinimumSectionSize(24)
        self.setIndentation(INDENT)
        # Shape, dtype, size, parameters and shard are sized to their content and never cut at 1024 px and
        # up; Name takes the rest (fit_columns). Long names are cut in the middle (both the module and the
        # leaf stay), whole in the tooltip.
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self._content: dict[int, int] | None = None  # column -> pixels its widest text needs
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
        """Every column but Name as wide as its widest text (`content_widths`), Name the rest; only when
        Name would keep less than NAME_KEEPS (a tree narrower than a 1024 px window gives it) do the other
        columns give way, down to their captions, which are never cut."""
        header = self.header()
        width = self.viewport().width()
        columns = self.shown_columns()
        content = self.content_widths()
        caption = {c: self._caption_width(c) for c in columns}
        sizes = {c: content[c] for c in columns}
        room = width - NAME_KEEPS
        if room < sum(sizes.values()):
            spare = sum(content[c] - caption[c] for c in columns)
            squeeze = max(0.0, min(1.0, (room - sum(caption.values())) / spare)) if spare else 0.0
            sizes = {c: caption[c] + int((content[c] - caption[c]) * squeeze) for c in columns}
        for c in columns:
            header.resizeSection(c, sizes[c])
        header.resizeSection(NAME, max(header.minimumSectionSize(), width - sum(sizes.values())))

    def shown_columns(self) -> list[int]:
        """The columns other than Name that are shown (Device and Shard only where they say something)."""
        return [c for c in range(self.tree_model.columnCount()) if c != NAME and not self.isColumnHidden(c)]

    def columns_width(self) -> int:
        """Pixels the shown columns other than Name need for their whole texts."""
        content = self.content_widths()
        return sum(content[c] for c in self.shown_columns())

    def content_widths(self) -> dict[int, int]:
        """Per column other than Name: the pixels its caption and its widest text need (measured once, on
        the texts the model samples: `widest_texts`)."""
        if self._content is None:
            metrics = self.fontMetrics()
            pad = self._cell_padding()
            widest = self.tree_model.widest_texts()
            self._content = {c: max([self._caption_width(c)] + [metrics.horizontalAdvance(t) + pad for t in texts])
                             for c, texts in widest.items()}
        return self._content

    def _caption_width(self, column: int) -> int:
        """A header section's width that shows its caption whole, with room for the sort arrow."""
        header = self.header()
        option = QStyleOptionHeader()
        header.initStyleOption(option)
        option.rect = QRect(0, 0, 200, max(header.height(), 20))
        option.sortIndicator = QStyleOptionHeader.SortIndicator.SortDown
        option.section = column
        label = header.style().subElementRect(QStyle.SubElement.SE_HeaderLabel, option, header).width()
        caption = str(self.tree_model.headerData(column, Qt.Orientation.Horizontal))
        return header.fontMetrics().horizontalAdvance(caption) + (200 - label) + 2

    def _cell_padding(self) -> int:
        """Pixels a cell's text loses to the style's margins (the eliding delegates keep 12)."""
        option = QStyleOptionViewItem()
        self.initViewItemOption(option)
        option.rect = QRect(0, 0, 200, 20)
        option.text = "x"
        option.features |= QStyleOptionViewItem.ViewItemFeature.HasDisplay
        style = self.style()
        text = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, self).width()
        margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, self) + 1
        return max(200 - text + 2 * margin, 12) + 2

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
