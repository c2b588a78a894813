"""Text cut where it does not matter: eliding rules that keep the part of a cell that tells rows apart.

Qt elides one way per view. A shard column of `model-00001-of-00002.safetensors` and
`model-00002-of-00002.safetensors` then reads `mode…sors` twice, an optimizer row `exp_avg of
encoder.layers.0.weight` loses its parameter. A delegate draws each cell through a rule of its own; the
full text stays in the tooltip.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QStyledItemDelegate, QStyleOptionViewItem

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


__all__ = ["ElidingDelegate", "elide_label", "elide_middle", "elide_to_number"]
