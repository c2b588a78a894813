"""A lazy QAbstractItemModel over the grouped checkpoint rows, with its own filter index and sorting.

Filtering and sorting live in the model rather than in a QSortFilterProxyModel: a proxy calls a Python
`filterAcceptsRow`/`lessThan` per row (millions of calls on 100,000 tensors), while here one pass over
the rows computes the visible set and each children list is sorted with a key function, only when the
view asks for it. Children lists longer than FETCH_CHUNK arrive through canFetchMore/fetchMore.
"""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QStyle

from ckptview.core.inspect.figure_terms import FIGURE_LABELS
from ckptview.core.inspect.grouping import Row
from ckptview.core.inspect.query import Query, RowOrder, visible_rows
from ckptview.core.read.values.repeats import format_factor, repeats
from ckptview.core.text import SHOWN_CHARS, short_repr, shown
from ckptview.core.units import count_text, figure, human_bytes, natural_key, plural, shape_text
from ckptview.gui.base.palette import color

COLUMNS = ("Name", "Shape", "Dtype", "Size", "Parameters", "Device", "Shard")
NAME, SHAPE, DTYPE, SIZE, PARAMS, DEVICE, SHARD = range(7)
HEADER_TIPS = {
    PARAMS: "Elements of the model's parameters here and below, as sum(p.numel() for p in model.parameters()) "
            "counts them (the Summary's number): buffers, counters and optimizer state are none",
    SIZE: "Bytes of the tensors here and below",
    SHARD: "Which file of the sharded checkpoint holds the tensor",
    DEVICE: "The device the tensor was saved from",
}


def shard_text(info: Any) -> str:
    """Which file(s) of a sharded checkpoint hold a tensor: 'model-00002-of-00003.safetensors',
    '3 chunks in __0_0.distcp, __1_0.distcp'; empty for single-file checkpoints."""
    shards = info.extra.get("shards") if info is not None else None
    if not shards:
        return ""
    files = list(dict.fromkeys(str(s.get("file", "?")).rsplit("/", 1)[-1] for s in shards if isinstance(s, dict)))
    if len(shards) == 1:
        return files[0] if files else ""
    listed = ", ".join(files[:2]) + (", ..." if len(files) > 2 else "")
    return f"{len(shards)} chunks in {listed}"


_SHARD_OF = re.compile(r"(\d+)-of-(\d+)")


def shard_label(info: Any) -> str:
    """What the Shard column shows: '2 of 3' for 'model-00002-of-00003.safetensors' (the number is what tells
    a folder's shards apart; the cell's tooltip names the file), a DCP file's name as it is ('__1_0.distcp'),
    '3 chunks' for a tensor split over several files."""
    shards = info.extra.get("shards") if info is not None else None
    if not shards:
        return ""
    if len(shards) > 1:
        return f"{len(shards)} chunks"
    name = shard_text(info)
    match = _SHARD_OF.search(name)
    return f"{int(match.group(1))} of {int(match.group(2))}" if match else name
def is_signature(row: Row) -> bool:
    """A row of a `.pt2`'s signature (`signature.inputs.0`: `x: float32[s0, 20]`): a shape, sized and shown
    whole in the Shape column like a tensor's, not a value's repr cut to its first characters."""
    up = row.parent.parent if row.parent is not None else None
    return up is not None and up.node is not None and up.node.type_name == "signature"


FETCH_CHUNK = 5000
WIDTH_SAMPLE = 4000  # rows whose texts size the columns (spread over the tree; the top-level rows too)
VALUE_CHARS = 16  # a value's text (a repr) longer than this does not widen the Shape column: its tooltip has it
ROW_ROLE = Qt.ItemDataRole.UserRole + 1  # the grouping Row behind an index
NONFINITE_ROLE = Qt.ItemDataRole.UserRole + 2  # (NaN, ±Inf) counted below a row by figures computed so far
Index = QModelIndex | QPersistentModelIndex


def _sort_key(column: int) -> Any:
    def tensor(row: Row) -> Any:
        return row.node.tensor if row.node is not None else None

    keys = {
        # The natural key of a name's first characters (splitting a 90 MB name held the GUI thread), then
        # the rest as it is: names up to SHOWN_CHARS sort as before.
        NAME: lambda r: (natural_key(r.label[:SHOWN_CHARS]), r.label[SHOWN_CHARS:]),
        SHAPE: lambda r: (len(tensor(r).shape), tensor(r).shape) if tensor(r) else (-1, ()),
        DTYPE: lambda r: tensor(r).dtype if tensor(r) else "",
        SIZE: lambda r: r.nbytes,
        PARAMS: lambda r: r.params,
        DEVICE: lambda r: tensor(r).device if tensor(r) else "",
        SHARD: lambda r: shard_text(tensor(r)),
    }
    return keys[column]


class CheckpointTreeModel(QAbstractItemModel):
    """Rows of a grouped checkpoint: group rows show subtree totals; filter with `set_query`."""

    def __init__(self, top: Row, parent: Any = None, flat: list[Row] | None = None) -> None:
        super().__init__(parent)
        self.top = top
        self._visible: set[int] | None = None  # None: no filter
        self._flat: list[Row] | None = flat  # every row, kept for filtering (built by the opening worker)
        self.match_count = top.tensors
        self._sort_column, self._sort_order = -1, Qt.SortOrder.AscendingOrder
        self._figure_order: RowOrder | None = None  # a `sort:` filter term; a clicked header goes first
        self._nonfinite: dict[int, tuple[int, int]] = {}  # id(row) -> (NaN, ±Inf) found by figures so far
        self._kids: dict[int, list[Row]] = {}
        self._pos: dict[int, int] = {}
        self._fetched: dict[int, int] = {}
        style = QApplication.style()
        self._icons = {
            "group": style.standardIcon(QStyle.StandardPixmap.SP_DirIcon),
            "container": style.standardIcon(QStyle.StandardPixmap.SP_DirLinkIcon),
            "tensor": style.standardIcon(QStyle.StandardPixmap.SP_FileIcon),
            "value": style.standardIcon(QStyle.StandardPixmap.SP_FileDialogDetailedView),
            "broken": style.standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning),
        }

    # --- structure -------------------------------------------------------------------------------
    def kids(self, row: Row) -> list[Row]:
        """The visible children of `row` in the current sort order (computed on first use)."""
        key = id(row)
        found = self._kids.get(key)
        if found is None:
            found = row.children
            if self._visible is not None:
                visible = self._visible
                found = [c for c in found if id(c) in visible]
            if self._sort_column >= 0:
                found = sorted(found, key=_sort_key(self._sort_column),
                               reverse=self._sort_order == Qt.SortOrder.DescendingOrder)
            elif self._figure_order is not None:
                found = sorted(found, key=self._figure_order.key)
            self._kids[key] = found
            for i, child in enumerate(found):
                self._pos[id(child)] = i
        return found

    def row_of(self, index: Index) -> Row:
        """The Row behind `index` (the invisible top for an invalid index)."""
        return index.internalPointer() if index.isValid() else self.top

    def index_of(self, row: Row) -> QModelIndex:
        """The index of `row`, fetching its ancestors' children as needed; invalid if filtered out."""
        if row is self.top or row.parent is None:
            return QModelIndex()
        parent_index = self.index_of(row.parent)
        if row.parent is not self.top and not parent_index.isValid():
            return QModelIndex()
        kids = self.kids(row.parent)
        pos = self._pos.get(id(row))
        if pos is None or pos >= len(kids) or kids[pos] is not row:
            return QModelIndex()
        while pos >= self._fetched_count(row.parent):
            self.fetchMore(parent_index)
        return self.createIndex(pos, 0, row)

    def _fetched_count(self, row: Row) -> int:
        return self._fetched.get(id(row), min(FETCH_CHUNK, len(self.kids(row))))

    def index(self, r: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        kids = self.kids(self.row_of(parent))
        if 0 <= r < len(kids) and 0 <= column < len(COLUMNS):
            return self.createIndex(r, column, kids[r])
        return QModelIndex()

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid():
            return QModelIndex()
        up = index.internalPointer().parent
        if up is None or up is self.top:
            return QModelIndex()
        if id(up) not in self._pos:
            self.kids(up.parent)
        return self.createIndex(self._pos[id(up)], 0, up)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if parent.isValid() and parent.column() != 0:
            return 0
        return self._fetched_count(self.row_of(parent))

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(COLUMNS)

    def hasChildren(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        # Called for every row the view lays out (10,000 when a level that long is expanded): no filter
        # means every child is visible, and the count needs no sorted list.
        if not parent.isValid():
            return bool(self.kids(self.top))
        if parent.column() != 0:
            return False
        row: Row = parent.internalPointer()
        return bool(row.children) if self._visible is None else bool(self.kids(row))

    def canFetchMore(self, parent: Index) -> bool:
        row = self.row_of(parent)
        return self._fetched_count(row) < len(self.kids(row))

    def fetchMore(self, parent: Index) -> None:
        row = self.row_of(parent)
        have, total = self._fetched_count(row), len(self.kids(row))
        more = min(FETCH_CHUNK, total - have)
        if more <= 0:
            return
        self.beginInsertRows(parent, have, have + more - 1)
        self._fetched[id(row)] = have + more
        self.endInsertRows()

    # --- data ------------------------------------------------------------------------------------
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS.get(section)
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight if section in (SIZE, PARAMS) else Qt.AlignmentFlag.AlignLeft)
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row: Row = index.internalPointer()
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return shown(self._text(row, column))  # names from the file: bounded, no bidi override or newline
        if role == ROW_ROLE:
            return row
        if role == NONFINITE_ROLE:
            return self._nonfinite.get(id(row))
        if role == Qt.ItemDataRole.DecorationRole and column == NAME:
            return self._icon(row)
        if role == Qt.ItemDataRole.TextAlignmentRole and column in (SIZE, PARAMS):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(row, column)
        if role == Qt.ItemDataRole.ForegroundRole:
            if column == NAME and id(row) in self._nonfinite:  # holds NaN/Inf: the colour NaN has everywhere
                return color("nan")
            info = row.node.tensor if row.node is not None else None
            if info is not None and (info.broken or (info.storage is not None and info.storage.broken)):
                return color("error")
            if column != NAME and row.node is not None and row.node.kind not in ("tensor",) and column == SHAPE:
                return color("muted")
        return None

    def _text(self, row: Row, column: int) -> str:
        node = row.node
        info = node.tensor if node is not None else None
        if column == NAME:
            return row.label
        if info is not None:
            if column == SHARD:
                return shard_label(info)
            if column == SHAPE and (found := repeats(info)) is not None:  # what the file stores is less
                return f"{shape_text(info.shape)} (repeats {format_factor(found.factor)})"
            return (row.label, shape_text(info.shape), info.dtype, human_bytes(row.nbytes),
                    count_text(row.params) if row.params else "", info.device)[column]
        if node is not None and node.kind == "value":
            if column == SHAPE and is_signature(row):  # `x: float32[s0, 20]`: a shape, read whole
                return str(node.value)
            if column == SHAPE:
                if isinstance(node.value, float):  # a loss, a learning rate: readable; exact in the tooltip
                    return figure(node.value, ".5g")
                return short_repr(node.value, 60)
            if column == DTYPE:
                return node.type_name or type(node.value).__name__
            return ""
        if column in (SHAPE, DTYPE) and node is not None:  # a container: its count, and its type apart
            if column == DTYPE:
                return (node.type_name or node.kind).rsplit(".", 1)[-1]
            n = len(node.children)
            return f"{n:,} item{'s' if n != 1 else ''}"
        if row.tensors and column == SIZE:
            return human_bytes(row.nbytes)
        if row.params and column == PARAMS:
            return count_text(row.params)
        return ""

    def _icon(self, row: Row) -> QIcon:
        node = row.node
        if node is None:
            return self._icons["group"]
        if node.kind == "tensor":
            info = node.tensor
            if info is not None and (info.broken or (info.storage is not None and info.storage.broken)):
                return self._icons["broken"]
            return self._icons["tensor"]
        return self._icons["value" if node.kind == "value" else "container"]

    def _tooltip(self, row: Row, column: int = NAME) -> str:
        """The cell's whole text (cells are elided), then the row's full name and what it holds."""
        info = row.node.tensor if row.node is not None else None
        name = shown(row.name)
        label = row.label
        up = row.parent
        if up is not None and " · " in up.label and up.search_name == f"{up.label}.{up.name}".lower():
            label = f"{label} of {up.label.partition(' · ')[2]}"  # optimizer state: the row above names it
        if label and label != row.name and not row.name.endswith(label):
            name = f"{shown(label)}\n{name}"  # an optimizer row named by its parameter: both names
        node = row.node
        if column != NAME:
            whole = (repr(node.value) if node is not None and node.kind == "value" and column == SHAPE
                     else shard_text(info) if column == SHARD else self._text(row, column))
            if whole:
                name = f"{shown(whole)}\n{name}"
        placed = self.figure_order
        value = placed.value(row) if placed is not None else None
        if placed is not None and value is not None:
            label = FIGURE_LABELS[placed.order.figure]
            below = "" if row.node is not None and row.node.kind == "tensor" else (
                f" (the {'largest' if placed.order.descending else 'smallest'} below)")
            name = f"{name}\n{label} {value:.6g}{below}"
        counted = self._nonfinite.get(id(row))
        if counted is not None:
            words = " and ".join(w for w in (f"{counted[0]:,} NaN" if counted[0] else "",
                                             f"{counted[1]:,} ±Inf" if counted[1] else "") if w)
            name = f"{name}\nholds {words} (counted by the figures computed so far)"
        reason = info and (info.broken or (info.storage.broken if info.storage else None))
        if reason:
            return f"{name}\nbroken: {shown(reason)}"
        if info is not None and (found := repeats(info)) is not None:
            return f"{name}\n{found.describe(info.dtype)}"
        if row.tensors > 1 or row.is_group:
            params = f"{count_text(row.params)} parameter{'' if row.params == 1 else 's'}"
            return f"{name}\n{plural(row.tensors, 'tensor')}, {params}, {human_bytes(row.nbytes)}"
        return name

    def widest_texts(self, sample: int = WIDTH_SAMPLE, count: int = 4) -> dict[int, list[str]]:
        """Per column other than Name, the `count` longest texts (by characters) among the top-level rows
        and up to `sample` rows spread over the whole tree: what the columns make room for. A value's text
        in the Shape column (a repr) counts only up to VALUE_CHARS characters: it may be cut, shapes not."""
        rows = self.flat_rows()
        step = max(1, len(rows) // sample)
        picked = rows[::step] + self.kids(self.top)
        texts: dict[int, set[str]] = {c: set() for c in range(len(COLUMNS)) if c != NAME}
        for row in picked:
            if row is self.top:
                continue
            is_value = row.node is not None and row.node.kind == "value" and not is_signature(row)
            for column, found in texts.items():
                text = self._text(row, column)
                if text and not (is_value and column == SHAPE and len(text) > VALUE_CHARS):
                    found.add(shown(text))
        return {c: sorted(found, key=len, reverse=True)[:count] for c, found in texts.items()}

    def widest_names(self, sample: int = WIDTH_SAMPLE, count: int = 64) -> list[tuple[int, str]]:
        """(depth below the top, name as shown) of the `count` longest names among the top-level rows and up
        to `sample` rows spread over the whole tree: what the Name column makes room for."""
        rows = self.flat_rows()
        step = max(1, len(rows) // sample)
        depth: dict[int, int] = {id(self.top): -1}
        found: list[tuple[int, str]] = []
        for row in rows[::step] + self.kids(self.top):
            if row is self.top:
                continue
            chain = []
            up: Row | None = row
            while up is not None and id(up) not in depth:
                chain.append(up)
                up = up.parent
            level = depth[id(up)] if up is not None else -1
            for link in reversed(chain):
                level += 1
                depth[id(link)] = level
            found.append((depth[id(row)], shown(row.label)))
        found.sort(key=lambda item: len(item[1]) + 2 * item[0], reverse=True)
        return found[:count]

    def set_nonfinite(self, marks: dict[int, tuple[int, int]]) -> None:
        """Mark rows holding NaN/Inf (`core.inspect.marks.nonfinite_marks`): names in the NaN colour, counts
        in the tooltip."""
        self._nonfinite = marks
        if self.rowCount():  # every shown name may change colour: repaint them
            self.dataChanged.emit(self.index(0, NAME), self.index(self.rowCount() - 1, NAME),
                                  [Qt.ItemDataRole.ForegroundRole])

    # --- filter and sort -------------------------------------------------------------------------
    def set_query(self, query: Query) -> None:
        """Show only rows matching `query` and their ancestors (an empty query shows everything)."""
        if query.empty:
            self.show_rows(None, self.top.tensors)
        else:
            self.show_rows(*visible_rows(self.top, query, self.flat_rows()))

    def flat_rows_if_built(self) -> list[Row] | None:
        """The filter's list of every row, if it exists (nothing is built)."""
        return self._flat

    def flat_rows(self) -> list[Row]:
        """Every row, depth first (the filter's index; built by the opening worker when possible)."""
        if self._flat is None:
            self._flat = list(self.top.walk())
        return self._flat

    def show_rows(self, visible: set[int] | None, match_count: int, order: RowOrder | None = None) -> None:
        """Show the rows whose ids are in `visible` (None: all), as computed by `query.visible_rows`, placed
        by `order` (a `sort:` term's figure, `query.row_order`) while no header sorts them."""
        self.beginResetModel()
        self._visible, self.match_count = visible, match_count
        self._figure_order = order
        self._clear()
        self.endResetModel()

    @property
    def figure_order(self) -> RowOrder | None:
        """The figure that orders the rows now (None: a header's column or the file's order)."""
        return self._figure_order if self._sort_column < 0 else None

    @property
    def filtered(self) -> bool:
        """True while a filter hides rows."""
        return self._visible is not None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort every level by `column` (-1: file order), keeping selection and expansion."""
        self.layoutAboutToBeChanged.emit()
        old = self.persistentIndexList()
        rows = [(i.internalPointer(), i.column()) for i in old]
        fetched = dict(self._fetched)
        self._sort_column, self._sort_order = column, order
        self._clear()
        self._fetched = fetched  # keep how much the view has already fetched
        new = []
        for row, col in rows:
            self.kids(row.parent)
            pos = self._pos.get(id(row))
            ok = pos is not None and pos < self._fetched_count(row.parent)
            new.append(self.createIndex(pos, col, row) if ok and pos is not None else QModelIndex())
        self.changePersistentIndexList(old, new)
        self.layoutChanged.emit()

    def _clear(self) -> None:
        self._kids.clear()
        self._pos.clear()
        self._fetched.clear()
