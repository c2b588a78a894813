"""Where the user is in a checkpoint tab's tree (selection, current row, expanded rows), kept by name so
that it survives a reload of the file (rows are new objects; names that still exist come back)."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QItemSelectionModel
from PySide6.QtWidgets import QAbstractItemView, QTreeView

from ckptview.core.inspect.grouping import Row, find_row
from ckptview.gui.checkpoint.tree_model import CheckpointTreeModel

RESTORE_ROWS_LIMIT = 200_000  # tensors up to which a reload restores expansion as well as the selection
RESTORE_EXPANDED_LIMIT = 2000  # expanded (and selected) rows remembered across a reload


def save_place(tree: QTreeView, model: CheckpointTreeModel, top: Row, filter_text: str, side_tab: str,
               ) -> dict[str, Any]:
    """The current, selected and expanded rows by name, the filter text and the side tab (by its title: the
    file reloaded may hold other side tabs, a Training tab no more)."""
    current = tree.currentIndex()
    selected = [model.row_of(i).name for i in tree.selectionModel().selectedRows(0)]
    place: dict[str, Any] = {
        "current": model.row_of(current).name if current.isValid() else None,
        "selected": selected[:RESTORE_EXPANDED_LIMIT],
        "filter": filter_text,
        "side_tab": side_tab,
        "expanded": [],
    }
    if top.tensors <= RESTORE_ROWS_LIMIT:  # expansion only when cheap to walk and to redo
        index = model.index(0, 0)
        seen = 0
        while index.isValid() and seen < 50 * RESTORE_EXPANDED_LIMIT:
            if tree.isExpanded(index):
                place["expanded"].append(model.row_of(index).name)
                if len(place["expanded"]) >= RESTORE_EXPANDED_LIMIT:
                    break
            index = tree.indexBelow(index)
            seen += 1
    return place


def restore_place(tree: QTreeView, model: CheckpointTreeModel, top: Row, place: dict[str, Any]) -> None:
    """Expand, select and scroll to the rows of `place` that exist in the new tree."""
    wanted = {n for n in [place["current"], *place["selected"], *place["expanded"]] if n is not None}
    found: dict[str, Row] = {}
    if top.tensors <= RESTORE_ROWS_LIMIT:
        for row in top.walk():
            if row.name in wanted and row.name not in found:
                found[row.name] = row
    elif place["current"] is not None:
        current = find_row(top, place["current"])
        if current is not None:
            found[current.name] = current
    for name in place["expanded"]:
        if name in found:
            index = model.index_of(found[name])
            if index.isValid():
                tree.expand(index)
    selection = tree.selectionModel()
    flag = QItemSelectionModel.SelectionFlag
    current = found.get(place["current"]) if place["current"] is not None else None
    if current is not None and model.index_of(current).isValid():
        # Explicit flags: Ctrl still held from Ctrl+R must not turn this into a toggle.
        selection.setCurrentIndex(model.index_of(current), flag.ClearAndSelect | flag.Rows)
    for name in place["selected"]:
        if name in found and name != place["current"]:
            index = model.index_of(found[name])
            if index.isValid():
                selection.select(index, flag.Select | flag.Rows)
    if current is not None:
        tree.scrollTo(model.index_of(current), QAbstractItemView.ScrollHint.PositionAtCenter)
