"""The "Training" side panel: epoch, step, loss and other facts, schedulers, hyper-parameters, versions.

The panel is filled from metadata at once; one-element tensors (a saved ``loss``) are read in a worker
the first time the panel is shown, then the panel is refilled.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QLabel, QScrollArea, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.inspect.optimizer import OptimizerState, find_optimizers
from ckptview.core.inspect.training import TrainingSummary, callback_fact, short_fact_keys, training_summary
from ckptview.core.text import shown
from ckptview.core.units import number
from ckptview.gui.base.tables import cell_text
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.host import CheckpointContext

FIRST_COLUMN_MAX = 240  # pixels of a section's first column (names: cut in the middle, whole in the tooltip)
CALLBACK_PREFIX = "Callback "  # a Lightning callback's section: "Callback ModelCheckpoint{monitor=val_loss}"
# Shown first, in this order, when present; the other facts follow in file order.
FIRST_FACTS = ("epoch", "global_step", "step", "iteration", "iter", "loss", "best_loss", "val_loss")


def value_text(value: Any) -> str:
    """A fact as the panel shows it."""
    if isinstance(value, list):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    return number(value, ".6g")


def _table(rows: list[tuple[str, ...]], headers: list[str], tips: list[str] | None = None) -> QTableWidget:
    """A read-only table of `rows`; `tips` (one per row) are the whole texts of the first column."""
    table = QTableWidget(len(rows), len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.horizontalHeader().setStretchLastSection(True)
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            text = shown(text)  # names and values from the file: bounded (Qt sizes the column to it), escaped
            item = QTableWidgetItem(text)
            item.setToolTip(text if len(text) > 30 else "")
            if c == 0 and tips is not None and tips[r] != row[0]:
                item.setToolTip(shown(tips[r]))  # the key as the file has it
            table.setItem(r, c, item)
    table.resizeColumnsToContents()
    if table.columnCount() > 1 and table.columnWidth(0) > FIRST_COLUMN_MAX:  # names never push values away
        table.setColumnWidth(0, FIRST_COLUMN_MAX)
        table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    # As tall as its rows (up to a limit): the panel scrolls as a whole, not table by table.
    height = table.horizontalHeader().height() + sum(table.rowHeight(r) for r in range(min(len(rows), 25))) + 4
    table.setFixedHeight(height)
    return table


class TrainingPanel(QWidget):
    """Facts of a training checkpoint, one table per section; sections without content are left out."""

    summaryReady = Signal()  # the panel shows the read values of one-element tensors

    def __init__(self, context: CheckpointContext | None = None, checkpoint: Checkpoint | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.checkpoint = checkpoint if checkpoint is not None else context.checkpoint if context else None
        orders = context.param_orders if context is not None else None
        self.optimizers: list[OptimizerState] = find_optimizers(self.checkpoint, orders) if self.checkpoint else []
        self.summary = training_summary(self.checkpoint, read_scalars=False) if self.checkpoint else TrainingSummary()
        self.tables: dict[str, QTableWidget] = {}
        self._read = False
        self.slot = JobSlot(self)
        self.slot.returned.connect(self._on_read)
        self.body = QWidget()
        self.body_layout = QVBoxLayout(self.body)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.body)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        self._fill()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        """Read the one-element tensors the first time the panel is seen."""
        super().showEvent(event)
        if not self._read and self.checkpoint is not None:
            self._read = True
            self.slot.start(training_summary, self.checkpoint)

    def _on_read(self, summary: object) -> None:
        assert isinstance(summary, TrainingSummary)
        self.summary = summary
        self._fill()
        self.summaryReady.emit()

    def _fill(self) -> None:
        while self.body_layout.count():
            item = self.body_layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self.tables = {}
        s = self.summary
        if s.is_empty and not self.optimizers:
            self._add_label("No training state in this checkpoint: no epoch, step, optimizer, scheduler or "
                            "hyper-parameters.")
        facts = sorted(s.scalars, key=lambda kv: FIRST_FACTS.index(kv[0]) if kv[0] in FIRST_FACTS else len(FIRST_FACTS))
        run = [(k, v) for k, v in facts if callback_fact(k) is None]
        keys = [k for k, _ in run]
        self._section("Run", [(k, value_text(v)) for k, (_, v) in zip(short_fact_keys(keys), run, strict=True)],
                      ["fact", "value"], tips=keys)
        self._callbacks([(k, v) for k, v in facts if callback_fact(k) is not None])
        self._section("Optimizers", [self._optimizer_row(o) for o in self.optimizers],
                      ["where", "kind", "groups", "lr", "params", "mapping"])
        self._section("Schedulers", [(sch.name, sch.kind, key, value_text(v)) for sch in s.schedulers
                                     for key, v in sch.fields], ["where", "kind", "field", "value"])
        self._section("Hyper-parameters", list(s.hyper_parameters), ["name", "value"])
        self._section("Versions", list(s.versions), ["package", "version"])
        self.body_layout.addStretch(1)

    def _callbacks(self, facts: list[tuple[str, Any]]) -> None:
        """A section per Lightning callback, titled by what tells it from the others (ModelCheckpoint{monitor=
        val_loss}; its whole state key in the title's tooltip), its fields below: a state key repeats the
        callback's init arguments, and as a column of names it pushed the values off screen."""
        groups: dict[str, list[tuple[str, str, Any]]] = {}
        for key, value in facts:
            found = callback_fact(key)
            assert found is not None
            groups.setdefault(found[0], []).append((found[1], key, value))
        heads = list(groups)
        for head, title in zip(heads, short_fact_keys(heads), strict=True):
            rows = groups[head]
            self._section(CALLBACK_PREFIX + title, [(name, value_text(v)) for name, _, v in rows], ["field", "value"],
                          tips=[key for _, key, _ in rows], title_tip=head)

    def callback_titles(self) -> list[str]:
        """The callbacks' sections, by the names they are shown with (tests read the panel through this)."""
        return [t.removeprefix(CALLBACK_PREFIX) for t in self.tables if t.startswith(CALLBACK_PREFIX)]

    def callback_rows(self, title: str) -> list[list[str]]:
        """The texts of one callback's table, row by row."""
        return self.section_rows(CALLBACK_PREFIX + title)

    @staticmethod
    def _optimizer_row(opt: OptimizerState) -> tuple[str, ...]:
        lrs = ", ".join(value_text(g.get("lr")) for g in opt.groups)
        with_state = sum(1 for p in opt.params if p.node is not None)
        return (opt.label, opt.kind, str(len(opt.groups)), lrs, f"{with_state} of {len(opt.params)} with state",
                opt.mapping)

    def _add_label(self, text: str, tip: str = "") -> QLabel:
        label = QLabel(text)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label.setToolTip(tip)
        self.body_layout.addWidget(label)
        return label

    def _section(self, title: str, rows: list[tuple[str, ...]], headers: list[str],
                 tips: list[str] | None = None, title_tip: str = "") -> None:
        if not rows:
            return
        # A title from the file (a callback's name) is escaped; it may break after its commas and braces.
        breakable = html.escape(shown(title)).replace(", ", ",\u200b ").replace("{", "{\u200b")
        self._add_label(f"<b>{breakable}</b>", shown(title_tip) if title_tip else "")
        table = _table(rows, headers, tips)
        self.tables[title] = table
        self.body_layout.addWidget(table)

    def section_rows(self, title: str) -> list[list[str]]:
        """The texts of one section's table, row by row (tests read the panel through this)."""
        table = self.tables.get(title)
        if table is None:
            return []
        return [[cell_text(table, r, c) for c in range(table.columnCount())] for r in range(table.rowCount())]

    def facts(self) -> dict[str, str]:
        """Run facts as shown: name -> text."""
        return {row[0]: row[1] for row in self.section_rows("Run")}
