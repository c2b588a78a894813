"""Text cut where it does not matter: eliding rules that keep the part of a cell that tells rows apart.

Qt elides one way per view. A shard column of `model-00001-of-00002.safetensors` and
`model-00002-of-00002.safetensors` then reads `mode…sors` twice, an optimizer row `exp_avg of
encoder.layers.0.weight` loses its parameter. A delegate draws each cell through a rule of its own; the
full text stays in the tooltip.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QStyledItemDelegate, QStyleOptionViewItem, QWidget

Rule = Callable[[str, QFontMetrics, int], str]
ELLIPSIS = "…"
_SHARD_NUMBER = re.compile(r"\d+(?:-of-\d+)?")


def elide_middle(text: str, metrics: QFontMetrics, width: int) -> str:
    """Qt's middle elision: both ends stay."""
    return metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, max(0, width))


def elide_label(text: str, metrics: QFontMetrics, width: int) -> str:
    """`exp_avg of encoder.0.weight`, `3 · encoder.0.weight`: the head and its separator stay whole, the
    name after it is cut in the middle (its module and leaf stay)."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    for separator in (" of ", " · "):
        head, found, tail = text.partition(separator)
        if found:
            keep = head + separator
            room = width - metrics.horizontalAdvance(keep)
            if room > metrics.horizontalAdvance(ELLIPSIS + "ab"):
                return keep + elide_middle(tail, metrics, room)
            break
    return elide_middle(text, metrics, width)


def elide_to_number(text: str, metrics: QFontMetrics, width: int) -> str:
    """Shard file names differ by their number (`model-00002-of-00003.safetensors`): the text from the
    first number on is kept, cut at its end; what comes before is an ellipsis."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    match = _SHARD_NUMBER.search(text)
    if match is None or match.start() == 0:
        return metrics.elidedText(text, Qt.TextElideMode.ElideRight, max(0, width))
    rest = ELLIPSIS + text[match.start():]
    shown = metrics.elidedText(rest, Qt.TextElideMode.ElideRight, max(0, width))
    least = ELLIPSIS + match.group(0).split("-of-")[0] + ELLIPSIS  # the number itself is never cut
    return shown if len(shown) >= len(least) else least


class ElidingDelegate(QStyledItemDelegate):
    """Draws a column's cells elided by `rule` (the view's own elision would cut them elsewhere)."""

    def __init__(self, rule: Rule, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.rule = rule

    def elided(self, text: str, metrics: QFontMetrics, width: int) -> str:
        """What the cell shows of `text` in `width` pixels."""
        return self.rule(text, metrics, width)

    def initStyleOption(self, option: QStyleOptionViewItem,  # noqa: N802 (Qt's name)
                        index: QModelIndex | QPersistentModelIndex) -> None:
        """The cell's text, elided by the rule for the room its rectangle leaves."""
        super().initStyleOption(option, index)
        text = option.text
        rect = option.rect
        if not text or rect.width() <= 0:
            return
        room = rect.width() - 12  # the style's text margins
        if option.features & QStyleOptionViewItem.ViewItemFeature.HasDecoration:
            room -= option.decorationSize.width() + 4
        option.text = self.elided(text, option.fontMetrics, room)


class ElidedLabel(QLabel):
    """One line of plain text cut to the label's width by `rule` (the middle, by default), whole in its
    tooltip; it never asks for more width than a few characters, so a long path or name cannot widen the
    window. `whole_text()` is the text as set; `text()` what is shown."""

    def __init__(self, text: str = "", rule: Rule = elide_middle, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rule = rule
        self._whole = ""
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.set_whole_text(text)

    def whole_text(self) -> str:
        """The text as set, before cutting."""
        return self._whole

    def set_whole_text(self, text: str, tooltip: str | None = None) -> None:
        """Show `text` (cut to fit); the tooltip holds `tooltip`, or the whole text when it is cut."""
        self._whole = text
        self._tooltip = tooltip
        self._fit()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """A few characters wide: the rest is cut, never a reason to widen what holds the label."""
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.fontMetrics().horizontalAdvance("…" + self._whole[:4])), hint.height())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """The whole text's width (what the label would like), one line tall."""
        metrics = self.fontMetrics()
        margins = self.contentsMargins()
        return QSize(metrics.horizontalAdvance(self._whole) + margins.left() + margins.right() + 2 * self.margin(),
                     super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        """Cut the text again for the new width."""
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        room = self.contentsRect().width() - 2 * self.margin()
        shown = self.rule(self._whole, self.fontMetrics(), room) if room > 0 else self._whole
        if shown != self.text():
            super().setText(shown)
        tip = self._tooltip if self._tooltip is not None else (self._whole if shown != self._whole else "")
        if tip != self.toolTip():
            self.setToolTip(tip)


__all__ = ["ElidedLabel", "ElidingDelegate", "elide_label", "elide_middle", "elide_to_number"]
