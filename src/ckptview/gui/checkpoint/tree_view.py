"""The tree of a checkpoint tab: the view over `CheckpointTreeModel`, its columns fitted to the width, and
its context menu."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Protocol

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
from ckptview.gui.checkpoint.tree_model import (
    COLUMNS,
    DEVICE,
    DTYPE,
    NAME,
    PARAMS,
    SHARD,
    SIZE,
    CheckpointTreeModel,
)

__all__ = ["NAME_KEEPS", "YIELD_ORDER", "CheckpointTreeView", "ColumnChoices"]
NAME_KEEPS = 140  # pixels the Name column keeps before the other columns give way (down to their captions)
NAME_WANTS = 240  # pixels the tab's splitter gives the Name column at first, beside the other columns
INDENT = 14  # pixels per level: a Llama leaf is six levels down (Qt's 20 took 120 px of its Name cell)
# The columns that give way to the names when the tree is too narrow for both, least useful first: which
# shard holds a tensor, its parameter count and its bytes follow from its shape and dtype, which stay
# longest; Shape never goes (it is what a tensor is). A column the user chose (the header's menu) stays.
YIELD_ORDER = (SHARD, PARAMS, SIZE, DEVICE, DTYPE)
NAME_MARGIN = 12 + 4  # pixels a Name cell's text loses beside its icon (ElidingDelegate's margins)


class ColumnChoices(Protocol):
    """Where the user's choices of columns are kept (`Settings`, the tab's settings)."""

    def column_choice(self, column: str) -> bool | None:
        """Shown (True), hidden (False), or None: the tree decides."""
        ...

    def set_column_choice(self, column: str, shown: bool | None) -> None:
        """Keep a choice (None: the tree decides again)."""
        ...


class CheckpointTreeView(QTreeView):
    """Rows of a checkpoint: names first, file order until a header is clicked, a menu to copy."""

    status_message = Signal(str)

    def __init__(self, model: CheckpointTreeModel, sharded: bool, devices: AbstractSet[str],
                 settings: ColumnChoices | None = None) -> None:
        super().__init__()
        self.tree_model = model
        self.settings = settings
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
        self.yielded: set[int] = set()  # columns hidden for the names' sake (fit_columns)
        self._fitting = False
        # The shard column only means something for sharded folders and DCP checkpoints; where tensors
        # were saved, only when it is not the CPU for all of them.
        self.applicable = [c for c in range(len(COLUMNS)) if c != NAME
                           and not (c == SHARD and not sharded or c == DEVICE and devices <= {"cpu"})]
        self.setColumnHidden(SHARD, SHARD not in self.applicable)
        self.setColumnHidden(DEVICE, DEVICE not in self.applicable)
        # The user's choices (the header's menu, kept in the settings): True shown, False hidden; the
        # other columns give way to the names when the tree is narrow (`yielded`).
        self.choices: dict[int, bool] = {}
        for column in self.applicable:
            choice = settings.column_choice(COLUMNS[column]) if settings is not None else None
            if choice is not None:
                self.choices[column] = choice
                self.setColumnHidden(column, not choice)
        self._names: list[int] | None = None  # pixels the widest names need in the Name column
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self._header_menu)

    def setColumnHidden(self, column: int, hide: bool) -> None:  # noqa: N802 (Qt's name)
        """Qt's, and a column hidden or shown from outside (the Graph view) is no longer one that gave way."""
        if not self._fitting:
            self.yielded.discard(column)
        super().setColumnHidden(column, hide)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Refit the columns when the viewport is resized."""
        if event.type() == QEvent.Type.Resize:
            self.fit_columns()
        return super().viewportEvent(event)

    def fit_columns(self) -> None:
        """Every column but Name as wide as its widest text (`content_widths`), Name the rest. Where that
        rest cuts names, columns give way (`YIELD_ORDER`, hidden until there is room again) but those the
        user chose; only when Name would still keep less than NAME_KEEPS do the columns left give way, down
        to their captions, which are never cut."""
        if self._fitting:
            return
        self._fitting = True
        try:
            self._yield_to_names()
            self._fit_shown()
        finally:
            self._fitting = False

    def _yield_to_names(self) -> None:
        """Hide the columns that must give way for the names to be whole; show again those that need not."""
        width = self.viewport().width()
        if width <= 1:
            return
        content = self.content_widths()
        # The columns that could be shown now: not hidden by anyone else (the Graph view, the user).
        candidates = [c for c in self.applicable if c in self.yielded or not self.isColumnHidden(c)]
        kept = [c for c in candidates if c not in YIELD_ORDER or c in self.choices]
        least = sum(content[c] for c in kept)
        # The widest name that can be whole at all in this width sets the need (one absurd name does not
        # take every column away: it is cut, whole in its tooltip).
        fitting = [w for w in self.name_widths() if w <= width - least]
        need = max(fitting, default=0)
        yielded: set[int] = set()
        used = sum(content[c] for c in candidates)
        for column in YIELD_ORDER:
            if width - used >= need:
                break
            if column in candidates and column not in kept:
                yielded.add(column)
                used -= content[column]
        for column in candidates:
            hide = column in yielded
            if self.isColumnHidden(column) != hide:
                self.setColumnHidden(column, hide)
        self.yielded = yielded

    def name_widths(self) -> list[int]:
        """Pixels each of the widest names needs in the Name column: its level's indentation, the icon,
        the margins and the text (measured once, on the names the model samples: `widest_names`)."""
        if self._names is None:
            metrics = self.fontMetrics()
            icon = self.iconSize().width()
            if icon <= 0:
                icon = self.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize, None, self)
            indent = self.indentation()
            self._names = sorted((indent * (depth + 1) + icon + NAME_MARGIN + metrics.horizontalAdvance(text) + 2
                                  for depth, text in self.tree_model.widest_names()), reverse=True)
        return self._names

    def names_width(self) -> int:
        """Pixels the Name column needs for the widest name sampled."""
        return max(self.name_widths(), default=0)

    def set_column_choice(self, column: int, shown: bool | None) -> None:
        """The user's choice for `column`: shown, hidden, or None (the tree decides); kept in the settings."""
        if column not in self.applicable:
            return
        if shown is None:
            self.choices.pop(column, None)
        else:
            self.choices[column] = shown
            self.yielded.discard(column)
            self.setColumnHidden(column, not shown)
        if self.settings is not None:
            self.settings.set_column_choice(COLUMNS[column], shown)
        self.fit_columns()

    def build_header_menu(self) -> QMenu:
        """The header's menu: a check per column that can be shown (Name is always), and a way back to
        columns that give way to the names by themselves."""
        menu = QMenu(self)
        for column in self.applicable:
            action = menu.addAction(COLUMNS[column])
            action.setCheckable(True)
            action.setChecked(not self.isColumnHidden(column))
            if column in self.yielded:
                action.setToolTip("Hidden to keep the names whole; check to keep it shown")
            action.triggered.connect(lambda checked, c=column: self.set_column_choice(c, checked))
        menu.addSeparator()
        auto = menu.addAction("Fit Columns to Names", self._forget_choices)
        auto.setEnabled(bool(self.choices))
        auto.setToolTip("Columns you chose show or hide by themselves again, giving way to the names")
        return menu

    def _forget_choices(self) -> None:
        for column in list(self.choices):
            self.choices.pop(column)
            self.setColumnHidden(column, False)
            if self.settings is not None:
                self.settings.set_column_choice(COLUMNS[column], None)
        self.fit_columns()

    def _header_menu(self, pos: QPoint) -> None:
        menu = self.build_header_menu()
        menu.exec(self.header().mapToGlobal(pos))

    def _fit_shown(self) -> None:
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
