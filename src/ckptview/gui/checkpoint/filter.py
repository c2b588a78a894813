"""The filter box above a checkpoint's tree and its wiring: typing filters (in a worker on big trees),
the count of matches beside it, and the tree expanded to show them."""

from __future__ import annotations

import logging
from collections.abc import Generator

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QLabel, QLineEdit, QToolButton, QTreeView

from ckptview.core.figures.analysis import Analysis
from ckptview.core.inspect.figure_terms import compute_figures
from ckptview.core.inspect.grouping import Row
from ckptview.core.inspect.query import Query, QueryError, RowOrder, parse_query, row_order, visible_rows
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.units import plural
from ckptview.gui.base.palette import color
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.tree_model import CheckpointTreeModel

__all__ = ["EXPAND_ALL_LIMIT", "TreeFilter", "WORKER_ABOVE"]
log = logging.getLogger(__name__)
EXPAND_ALL_LIMIT = 5000  # visible rows up to which a filter result is expanded completely
WORKER_ABOVE = 20_000  # tensors above which typing filters in a worker (and waits longer between keys)
# What fits a 1024 px window's filter box; the whole language is in its tooltip.
PLACEHOLDER = "Filter: name, *glob*, 768x3072, bf16, >10MB, nan>0, norm>10, sort:-norm   (Ctrl+F, Esc clears)"
LANGUAGE_TIP = (
    "Words that must all match:\n"
    "  attn  a part of the name;  *.q_proj.weight  a glob;  /layers\\.1\\d\\./  a regular expression\n"
    "  768x3072, *x768  a shape;  float16, bf16, dtype:int*  a dtype;  >10MB, <=4KiB  a size;  device:cuda\n"
    "  nan>0, inf>0, norm>10, absmax<0.5, mean<0, std>1, zeros>0, min, max  a figure of the values\n"
    "  alpha<2, stable_rank<5, spectral_norm>10  a figure of a weight's spectrum\n"
    "  sort:-nan, sort:-norm, sort:alpha  order by a figure (- largest first)\n"
    "Figures are computed first, in the background (Cancel stops it). Esc clears the filter.")


Shown = tuple[set[int] | None, int, RowOrder | None]  # what `CheckpointTreeModel.show_rows` takes


def figure_filter(query: Query, top: Row, rows: list[Row], analysis: Analysis,
                  token: CancelToken | None = None) -> Generator[Progress, None, Shown]:
    """A filter with figure terms (`nan>0`, `norm>10`, `sort:-norm`): the figures of every tensor first (read
    once, kept in the checkpoint's Analysis), then the rows to show (None: all) and the order a `sort:` term
    puts them in. In a worker: progress, cancel."""
    infos = [r.node.tensor for r in rows if r.node is not None and r.node.tensor is not None]
    yield from compute_figures(query, infos, analysis, token)
    visible, count = (None, top.tensors) if query.empty else visible_rows(top, query, rows)
    return visible, count, row_order(query, rows)


class TreeFilter(QObject):
    """`edit` (the box) and `match_label` (how many match) for `tree`, which shows `model` of `top`; a filter
    with figure terms computes them in a worker (`cancel_button` stops it). `applied` follows every filter
    shown."""

    applied = Signal()

    def __init__(self, model: CheckpointTreeModel, tree: QTreeView, top: Row, leaf_count: int,
                 parent: QObject | None = None, analysis: Analysis | None = None) -> None:
        super().__init__(parent)
        self.model, self.tree, self.top, self.leaf_count = model, tree, top, leaf_count
        self.analysis = analysis if analysis is not None else Analysis()
        self.figures = JobSlot(self)  # the figures a filter compares: computed off the GUI thread
        self.figures.yielded.connect(self._on_figures_progress)
        self.figures.returned.connect(self._on_figures_done)
        self.figures.errored.connect(self._on_error_figures)
        self.figures.busy.connect(self._on_figures_busy)
        self.cancel_button = QToolButton()
        self.cancel_button.setText("Cancel")
        self.cancel_button.setToolTip("Stop computing the figures the filter compares")
        self.cancel_button.clicked.connect(self.cancel_figures)
        self.cancel_button.hide()
        self.edit = QLineEdit()
        self.edit.setObjectName("filterEdit")
        self.edit.setClearButtonEnabled(True)
        self.edit.setPlaceholderText(PLACEHOLDER)
        self.edit.setToolTip(LANGUAGE_TIP)
        self.match_label = QLabel()
        self.match_label.setObjectName("matchLabel")
        self.match_label.setMinimumWidth(170)
        self.match_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.slot = JobSlot(self)  # the typed filter's job, on large trees
        self.slot.returned.connect(self._on_filtered)
        self.slot.errored.connect(self._on_error)
        # Typing fires a timer, not a filter: a burst of keystrokes on 100,000 rows filters once.
        self._timer = QTimer(self, singleShot=True, interval=150 if top.tensors > WORKER_ABOVE else 40)
        self._timer.timeout.connect(self._typed)
        self.edit.textChanged.connect(lambda _text: self._timer.start())
        self.edit.returnPressed.connect(self._typed)
        # Escape clears the filter, in the box and in the tree where the matches are looked at.
        self.escapes: list[QShortcut] = []
        for widget in (self.edit, tree):
            escape = QShortcut(QKeySequence(Qt.Key.Key_Escape), widget)
            escape.setContext(Qt.ShortcutContext.WidgetShortcut)
            escape.activated.connect(self.clear)
            self.escapes.append(escape)
        tree.header().sortIndicatorChanged.connect(lambda *_: self._show_count())  # a header takes over the order
        self._show_count()

    def clear(self) -> None:
        """Empty the box and show every row (Escape); nothing happens when it is empty."""
        if self.edit.text():
            self.set_text("")

    def apply(self) -> None:
        """Filter the tree by the text in the box now, on this thread (typing filters big trees in a worker;
        figure terms are computed in a worker first)."""
        query = self._parsed()
        if query is None:
            return
        if query.needs_figures:
            self._start_figures(query)
            return
        self.model.set_query(query)
        self._after_filter()

    def _start_figures(self, query: Query) -> None:
        self.match_label.setText("computing figures…")
        self.figures.start(figure_filter, query, self.top, self.model.flat_rows(), self.analysis)

    def cancel_figures(self) -> None:
        """Stop computing a filter's figures; the tree stays as it was."""
        if self.figures.running:
            self.figures.cancel()
            self._say_error("figures not computed (cancelled): the filter was not applied")

    def _on_figures_progress(self, step: object) -> None:
        if isinstance(step, Progress):
            self.match_label.setText(f"{step.message}: {step.fraction:.0%}…")

    def _on_figures_done(self, result: object) -> None:
        assert isinstance(result, tuple)
        visible, count, order = result
        if order is not None:  # a `sort:` term orders the rows: no header's column does
            self.tree.header().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.model.show_rows(visible, count, order)
        self._after_filter()

    def _on_error_figures(self, exc: object) -> None:
        log.error("computing the filter's figures failed", exc_info=exc if isinstance(exc, BaseException) else None)
        self._say_error(f"filter failed: {exc}")

    def _on_figures_busy(self, busy: bool) -> None:
        self.cancel_button.setVisible(busy)

    def set_text(self, text: str) -> None:
        """Put `text` in the box and filter by it now."""
        self.edit.setText(text)
        self.apply()

    def focus(self) -> None:
        """Put the cursor in the box, its text selected."""
        self.edit.setFocus()
        self.edit.selectAll()

    def stop(self) -> None:
        """Forget a filter still typed or computed (the tab reloads or closes)."""
        self._timer.stop()
        self.slot.cancel()
        self.figures.cancel()

    def _parsed(self) -> Query | None:
        self.stop()  # a result still on its way is now stale
        try:
            query = parse_query(self.edit.text())
        except QueryError as exc:
            self._say_error(str(exc))
            return None
        self.match_label.setStyleSheet("")
        return query

    def _typed(self) -> None:
        """The user typed or pressed Enter: on a big tree the matching runs in a worker."""
        if self.top.tensors <= WORKER_ABOVE:
            self.apply()
            return
        query = self._parsed()
        if query is None:
            return
        if query.needs_figures:
            self._start_figures(query)
            return
        if query.empty:
            self.model.show_rows(None, self.top.tensors)
            self._after_filter()
            return
        self.match_label.setText("filtering…")
        self.slot.start(visible_rows, self.top, query, self.model.flat_rows())

    def _on_filtered(self, result: tuple[set[int], int]) -> None:
        self.model.show_rows(*result)  # the slot drops a result typed over, reloaded or closed meanwhile
        self._after_filter()

    def _on_error(self, exc: BaseException) -> None:
        log.error("filtering the tree failed", exc_info=exc)
        self._say_error(f"filter failed: {type(exc).__name__}: {exc}")

    def _say_error(self, text: str) -> None:
        self.match_label.setText(text)
        self.match_label.setStyleSheet(f"color: {color('error').name()};")

    def _after_filter(self) -> None:
        if self.model.filtered:
            if self.model.match_count <= EXPAND_ALL_LIMIT:
                self.tree.expandAll()
            else:
                self.tree.expandToDepth(1)
        else:
            self.tree.expandToDepth(0 if len(self.model.kids(self.top)) > 1 else 1)
        self._show_count()
        self.applied.emit()

    def _show_count(self) -> None:
        if self.model.filtered:
            text = f"{self.model.match_count:,} of {self.leaf_count:,} match"
        else:
            text = f"{plural(self.leaf_count, 'entry', 'entries')}"
        placed = self.model.figure_order
        if placed is not None:
            text += f" · by {placed.order.words}"
        self.match_label.setText(text)
        self.match_label.setToolTip(f"sorted by {placed.order.words} (a module by its first tensor; a click on "
                                    "a header sorts by that column instead)" if placed is not None else "")
