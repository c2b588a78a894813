"""The "Values" side panel: a virtual table over a 2-D slice, read tile by tile off the GUI thread.

Only the tiles the view asks for are read from the file (positioned reads, in the thread pool); a cell whose
tile is not there yet shows '…' and is repainted when it arrives, so a 50,000 x 4,096 matrix scrolls
without ever being loaded whole.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSpinBox,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import CheckpointError
from ckptview.core.figures.analysis import Analysis
from ckptview.core.inspect.grouping import Selected
from ckptview.core.read.values.slicing import LazySlice2D, SliceError, default_spec
from ckptview.gui.base.job_bar import JobBar
from ckptview.gui.base.plots import nonfinite_colors
from ckptview.gui.base.tables import compact
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.host import CheckpointContext

if TYPE_CHECKING:  # imported where a plot or values are first needed, not at start-up
    import numpy as np

    from ckptview.core.read.values.slicing import LazySlice2D

TILE_ROWS, TILE_COLS = 256, 64
MAX_TILES = 64  # cached tiles per model (~1M cells)
MAX_COPY_CELLS = 1_000_000
# Rows and columns handed to Qt at once. Qt counts sections and header pixels in a C int: a dimension of
# 2**31 elements overflowed rowCount (SIGSEGV), 20 million columns of ~110 px overflowed the header's pixel
# length (it then painted every section). A page of 2**20 keeps both far inside (2**20 x 400 px < 2**31);
# larger slices are shown a page at a time.
PAGE = (1 << 20, 1 << 20)
INT_MAX = 2**31 - 1  # Qt's int


EXACT = 0  # "digits" value meaning: the shortest text that reads back as exactly the stored value
DEFAULT_DIGITS = 6


def format_cells(block: np.ndarray, digits: int = DEFAULT_DIGITS) -> np.ndarray:
    """Cell texts of a block of values: floats to `digits` significant digits, or exact (``EXACT``).

    Exact is numpy's shortest round-trip text in the value's own dtype (a float32 0.1 reads ``0.1``, and
    parsing it gives back the same bits); integers are always exact.
    """
    import numpy as np
    block = np.asarray(block)
    if block.dtype.kind in "iub":
        return block.astype(str)
    texts: np.ndarray  # np.vectorize is untyped
    if digits == EXACT:
        texts = np.vectorize(str, otypes=[object])(block)
        return texts.astype(str)
    if block.dtype.kind == "c":
        texts = np.vectorize(lambda z: f"{z.real:.{digits}g}{z.imag:+.{digits}g}j", otypes=[object])(block)
        return texts.astype(str)
    return np.char.mod(f"%.{digits}g", block.astype(np.float64))


# A cell's text (as format_cells writes it, lower-cased, without '+') -> its non-finite kind.
_NONFINITE_TEXT = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}


@dataclass(frozen=True)
class Tile:
    """The formatted cells of one tile of the table, at tile coordinates ``key``."""

    key: tuple[int, int]
    cells: np.ndarray


def _read_tile(analysis: Analysis, view: LazySlice2D, key: tuple[int, int], digits: int) -> Tile:
    r0, c0 = key[0] * TILE_ROWS, key[1] * TILE_COLS
    page = analysis.values_page(view, slice(r0, r0 + TILE_ROWS), slice(c0, c0 + TILE_COLS))
    return Tile(key, format_cells(page, digits))


class ValuesModel(QAbstractTableModel):
    """Rows x columns of a 2-D (mapped) array; tiles are read in workers and cached."""

    tileLoaded = Signal()

    def __init__(self, parent: QObject | None = None, analysis: Analysis | None = None) -> None:
        super().__init__(parent)
        self.analysis = analysis if analysis is not None else Analysis()  # reads the tiles' values
        self.view: LazySlice2D | None = None
        self.digits = DEFAULT_DIGITS
        self.widest = 0  # characters of the widest cell text loaded so far (columns size to it)
        self.tiles = JobSlot(self, replace=False)  # tiles load side by side; a new slice drops them all
        self.tiles.returned.connect(self._on_tile)
        self.tiles.errored.connect(self._on_tile_error)
        self.tiles.aborted.connect(self._on_tile_error)  # cancelled: those tiles may be asked for again
        self._tiles: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._pending: set[tuple[int, int]] = set()
        self.origin = (0, 0)  # the slice's row and column shown first (the page); tiles keep slice coordinates

    def set_view(self, view: LazySlice2D | None) -> None:
        """Show ``view`` (a lazily read 2-D slice of a tensor; None clears the table), from its first page."""
        self.beginResetModel()
        self.tiles.cancel()  # tiles of the previous slice still in flight are dropped
        self.widest = 0
        self.view = view
        self.origin = (0, 0)
        self._tiles.clear()
        self._pending.clear()
        self.endResetModel()

    def set_digits(self, digits: int) -> None:
        """Show floats with `digits` significant digits (``EXACT``: shortest exact text); re-reads the tiles."""
        self.digits = digits
        self.set_view(self.view)

    def page_size(self, axis: int) -> int:
        """Rows (axis 0) or columns (axis 1) on the current page: never more than Qt can count."""
        if self.view is None:
            return 0
        return max(0, min(PAGE[axis], self.view.shape[axis] - self.origin[axis]))

    def paged(self, axis: int) -> bool:
        """True when the slice has more rows (0) or columns (1) than one page holds."""
        return self.view is not None and self.view.shape[axis] > PAGE[axis]

    def set_origin(self, axis: int, start: int) -> None:
        """Show the page of rows (axis 0) or columns (axis 1) that begins at `start` (clamped, page-aligned)."""
        if self.view is None:
            return
        last = max(0, (self.view.shape[axis] - 1) // PAGE[axis] * PAGE[axis])
        start = min(max(0, start // PAGE[axis] * PAGE[axis]), last)
        if start == self.origin[axis]:
            return
        self.beginResetModel()
        self.origin = (start, self.origin[1]) if axis == 0 else (self.origin[0], start)
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else self.page_size(0)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else self.page_size(1)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        """Rows and columns are numbered by the tensor's own indices ([2000:2010, 4000:] reads 2000.., 4000..)."""
        if role not in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole) or self.view is None:
            return None
        axis = 0 if orientation == Qt.Orientation.Vertical else 1
        where = self.view.source_index(axis, section + self.origin[axis])
        if role == Qt.ItemDataRole.ToolTipRole:
            return None if where is None else f"index {where[1]:,} of dim {where[0]}"
        return "" if where is None else str(where[1])

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole:
            return self._mark(index)
        if role != Qt.ItemDataRole.DisplayRole or not index.isValid() or self.view is None:
            return None
        r, c = index.row() + self.origin[0], index.column() + self.origin[1]
        key = (r // TILE_ROWS, c // TILE_COLS)
        tile = self._tiles.get(key)
        if tile is None:
            self._request(key)
            return "…"
        self._tiles.move_to_end(key)
        return str(tile[r % TILE_ROWS, c % TILE_COLS])

    def _mark(self, index: QModelIndex | QPersistentModelIndex) -> QColor | None:
        """The colour of a NaN, +Inf or -Inf cell (the heat-map's colours); None for any other cell."""
        if not index.isValid() or self.view is None:  # integer cells never read 'nan' or 'inf'
            return None
        text = self.cell_text(index.row(), index.column())
        name = _NONFINITE_TEXT.get(text.lstrip("+").lower() if text else "")
        return None if name is None else QColor(nonfinite_colors()[name])

    def cell_text(self, row: int, col: int) -> str | None:
        """The text of a loaded cell of the page, or None while its tile is being read (tests use this)."""
        row, col = row + self.origin[0], col + self.origin[1]
        tile = self._tiles.get((row // TILE_ROWS, col // TILE_COLS))
        return None if tile is None else str(tile[row % TILE_ROWS, col % TILE_COLS])

    def _request(self, key: tuple[int, int]) -> None:
        if key in self._pending or self.view is None:
            return
        self._pending.add(key)
        self.tiles.start(_read_tile, self.analysis, self.view, key, self.digits)

    def _on_tile_error(self, _exc: object) -> None:
        self._pending.clear()  # which tile failed is unknown: let every pending tile be asked for again

    def _on_tile(self, result: object) -> None:
        import numpy as np
        assert isinstance(result, Tile)
        key, tile = result.key, result.cells
        self._pending.discard(key)
        self._tiles[key] = tile
        if tile.size:
            self.widest = max(self.widest, int(np.char.str_len(tile).max()))
        while len(self._tiles) > MAX_TILES:
            self._tiles.popitem(last=False)
        r0, c0 = key[0] * TILE_ROWS - self.origin[0], key[1] * TILE_COLS - self.origin[1]
        r1, c1 = min(r0 + tile.shape[0], self.page_size(0)) - 1, min(c0 + tile.shape[1], self.page_size(1)) - 1
        if r1 >= max(0, r0) and c1 >= max(0, c0):  # a tile of another page repaints nothing here
            self.dataChanged.emit(self.index(max(0, r0), max(0, c0)), self.index(r1, c1),
                                  [Qt.ItemDataRole.DisplayRole])
        self.tileLoaded.emit()


class ValuesPanel(QWidget):
    """Slice spec line edit above the virtual table; Ctrl+C copies the selection as tab-separated text."""

    sliceReady = Signal()

    def __init__(self, context: CheckpointContext | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Values come from the checkpoint's Analysis (slices checked, pages read only where shown).
        self.analysis = context.analysis if context is not None else Analysis()
        self.info: TensorInfo | None = None
        self.slot = JobSlot(self)
        self.slot.returned.connect(self._on_slice)
        self.slot.errored.connect(self._on_error)
        self.spec = QLineEdit()
        self.spec.setPlaceholderText("slice, e.g. [0, :, :]")
        self.spec.setToolTip("any slice: [0, :, :], [..., 2:10], [1, :, ::2]; Enter to apply")
        # One stepper per leading dimension of an N-D tensor: walks the 2-D slices (conv kernels).
        self.steppers: list[QSpinBox] = []
        self.stepper_row = QHBoxLayout()
        self.stepper_row.setContentsMargins(0, 0, 0, 0)
        self.digits = QComboBox()
        for label, digits in (("6 digits", 6), ("9 digits", 9), ("17 digits", 17), ("exact", EXACT)):
            self.digits.addItem(label, digits)
        self.digits.setToolTip("significant digits shown for floats; copy always copies exact values")
        self.status = QLabel("Select a tensor to see its values.")
        self.status.setWordWrap(True)
        self.model = ValuesModel(self, self.analysis)
        # The tiles being read, and Cancel (a strided slice of a large tensor reads many places of the file).
        self.job_bar = JobBar(self.model.tiles, steps=False)
        self.job_bar.cancelled.connect(
            lambda: self.status.setText("Cancelled: the cells shown '…' were not read (Compute or scrolling "
                                        "reads them)."))
        self.table = QTableView()
        self.job_bar.retry.connect(self.table.viewport().update)  # the cells shown ask for their tiles again
        self.table.setModel(self.model)
        for header in (self.table.horizontalHeader(), self.table.verticalHeader()):
            # Fixed sections: Qt must not measure 4,096 columns or 50,000 rows to lay them out.
            header.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.table.horizontalHeader().setDefaultSectionSize(self._column_width(DEFAULT_DIGITS + 7))
        compact(self.table)  # rows as tall as their text: more values in view on a 640 px screen
        top = QHBoxLayout()
        top.addWidget(self.spec, 1)
        top.addLayout(self.stepper_row)
        top.addWidget(self.digits)
        # Pages of rows and of columns, shown only for a slice larger than Qt can count (see PAGE).
        self.pages = QWidget()
        pages = QHBoxLayout(self.pages)
        pages.setContentsMargins(0, 0, 0, 0)
        self.prev_page: list[QToolButton] = []
        self.next_page: list[QToolButton] = []
        self.page_labels: list[QLabel] = []
        for axis, what in enumerate(("rows", "columns")):
            prev, page_label, nxt = QToolButton(), QLabel(), QToolButton()
            prev.setArrowType(Qt.ArrowType.LeftArrow)
            nxt.setArrowType(Qt.ArrowType.RightArrow)
            prev.setToolTip(f"previous {PAGE[axis]:,} {what}")
            nxt.setToolTip(f"next {PAGE[axis]:,} {what}")
            prev.clicked.connect(lambda _c=False, a=axis: self.turn_page(a, -1))
            nxt.clicked.connect(lambda _c=False, a=axis: self.turn_page(a, 1))
            for widget in (prev, page_label, nxt):
                pages.addWidget(widget)
            self.prev_page.append(prev)
            self.next_page.append(nxt)
            self.page_labels.append(page_label)
        pages.addStretch(1)
        self.pages.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.pages)
        layout.addWidget(self.table, 1)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        status_row.addWidget(self.job_bar)
        layout.addLayout(status_row)
        self.spec.returnPressed.connect(self._load)
        self.digits.currentIndexChanged.connect(lambda _i: self.model.set_digits(self.digits.currentData()))
        self.model.tileLoaded.connect(self._fit_columns)
        copy = QShortcut(QKeySequence.StandardKey.Copy, self.table)
        copy.activated.connect(self.copy_selection)

    def set_selection(self, entries: Sequence[Selected]) -> None:
        """Show the first selected tensor, starting with its first 2-D slice."""
        tensors = [n.tensor for n in entries if n.kind == "tensor" and n.tensor is not None]
        self.set_tensor(tensors[0] if tensors else None)
        if not tensors and any(n.kind == "module" or n.children for n in entries):
            self.status.setText("A module holds several tensors: the values table shows one at a time; select a "
                                "tensor below it (Statistics shows the whole module).")

    def set_tensor(self, info: TensorInfo | None, spec: str | None = None) -> None:
        """Show ``info`` sliced by ``spec`` (default: the first 2-D slice)."""
        self.info = info
        self._make_steppers(tuple(info.shape) if info is not None else ())
        self.spec.setText(spec if spec is not None else default_spec(info.shape) if info is not None else "")
        self._load()

    def _make_steppers(self, shape: tuple[int, ...]) -> None:
        for box in self.steppers:
            self.stepper_row.removeWidget(box)
            box.deleteLater()
        self.steppers = []
        for dim, size in enumerate(shape[:-2]):
            # A spin box holds a C int: past it, the slice line reaches any index ([3000000000, :, :]).
            box = QSpinBox(minimum=0, maximum=min(max(0, size - 1), INT_MAX))
            box.setPrefix(f"dim {dim}: ")
            box.setToolTip(f"index into dimension {dim} (size {size:,})"
                           + ("; type a slice for indices past 2,147,483,647" if size - 1 > INT_MAX else ""))
            box.valueChanged.connect(self._step)
            self.stepper_row.addWidget(box)
            self.steppers.append(box)

    def _step(self) -> None:
        """A stepper moved: show the 2-D slice at the steppers' indices."""
        self.spec.setText("[" + ", ".join([str(b.value()) for b in self.steppers] + [":", ":"]) + "]")
        self._load()

    def _column_width(self, chars: int) -> int:
        return self.fontMetrics().horizontalAdvance("0" * max(4, chars)) + 14

    def _fit_columns(self) -> None:
        """Columns as wide as the widest text loaded (never narrower than they are: no jumping)."""
        header = self.table.horizontalHeader()
        wanted = min(self._column_width(self.model.widest), 400)
        if wanted > header.defaultSectionSize():
            header.setDefaultSectionSize(wanted)

    def _load(self) -> None:
        self.model.set_view(None)
        self.pages.hide()
        if self.info is None:
            self.slot.cancel()
            self.status.setText("Select a tensor to see its values.")
            return
        self.status.setText("opening…")
        # Checks the spec in a worker; tiles read only their own bytes, in workers too.
        self.slot.start(self.analysis.values_slice, self.info, self.spec.text())

    def _on_slice(self, view: object) -> None:
        assert isinstance(view, LazySlice2D)
        self.model.set_view(view)
        self._show_page()
        self.sliceReady.emit()

    @staticmethod
    def orientation(axis: int) -> Qt.Orientation:
        """The header that numbers rows (axis 0: vertical) or columns (axis 1: horizontal)."""
        return Qt.Orientation.Vertical if axis == 0 else Qt.Orientation.Horizontal

    def turn_page(self, axis: int, step: int) -> None:
        """Show the previous (-1) or next (+1) page of rows (axis 0) or columns (axis 1)."""
        self.model.set_origin(axis, self.model.origin[axis] + step * PAGE[axis])
        self._show_page()

    def _show_page(self) -> None:
        """The status line and the page buttons for the page shown."""
        view = self.model.view
        if view is None:
            return
        text = f"{view.shape[0]:,} x {view.shape[1]:,} {self.info.dtype if self.info else ''}"
        shown = []
        for axis, what in enumerate(("rows", "columns")):
            paged = self.model.paged(axis)
            for widget in (self.prev_page[axis], self.page_labels[axis], self.next_page[axis]):
                widget.setVisible(paged)
            if not paged:
                continue
            first = self.model.origin[axis]
            last = first + self.model.page_size(axis) - 1
            self.page_labels[axis].setText(f"{what} {first:,}–{last:,} of {view.shape[axis]:,}")
            self.prev_page[axis].setEnabled(first > 0)
            self.next_page[axis].setEnabled(last < view.shape[axis] - 1)
            shown.append(f"{what} {first:,}–{last:,}")
        self.pages.setVisible(bool(shown))
        if shown:
            text += (f"; more than one page of {PAGE[0]:,}: this page shows {' and '.join(shown)} (the arrows "
                     "turn pages; a slice such as [1000000:, :] starts elsewhere)")
        self.status.setText(text)

    def _on_error(self, exc: object) -> None:
        if isinstance(exc, SliceError | CheckpointError):
            self.status.setText(str(exc))
        else:
            self.status.setText(f"error: {exc}")
        self.sliceReady.emit()

    def selection_text(self) -> str:
        """The selected cells' bounding rectangle as tab-separated lines (bounded in size)."""
        view = self.model.view
        if view is None:
            return ""
        indexes = self.table.selectionModel().selectedIndexes()
        if not indexes:
            return ""
        rows = [i.row() + self.model.origin[0] for i in indexes]
        cols = [i.column() + self.model.origin[1] for i in indexes]
        r0, r1, c0, c1 = min(rows), max(rows) + 1, min(cols), max(cols) + 1
        if (r1 - r0) * (c1 - c0) > MAX_COPY_CELLS:
            self.status.setText(f"selection too large to copy (more than {MAX_COPY_CELLS:,} cells)")
            return ""
        cells = format_cells(self.analysis.values_page(view, slice(r0, r1), slice(c0, c1)), EXACT)  # what is copied is the stored value, not its rounding
        return "\n".join("\t".join(row) for row in cells.tolist())

    def copy_selection(self) -> None:
        """Copy the selection to the clipboard."""
        text = self.selection_text()
        if text:
            QGuiApplication.clipboard().setText(text)
