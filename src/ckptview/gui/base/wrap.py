"""Words too long for a line broken onto several, so a message box that names them fits its screen.

A QMessageBox wraps its text at spaces (and after a path's slashes) but grows as wide as the longest run of
characters it cannot break: a tensor or global name of a few hundred characters, which a file may hold, put
the box's buttons off an 800 px screen. Here such a run is broken into lines of at most `width` pixels,
after a `.`, `/`, `_`, `-` or `=` where one is near the end of the line, else where the room ends. Every
character stays, in order; only line breaks are added.
"""

from __future__ import annotations

import re
from html import escape

from PySide6.QtGui import QFontMetrics, QGuiApplication
from PySide6.QtWidgets import QWidget

from ckptview.core.text import elide

__all__ = ["LINE_CHARS", "NAME_CHARS", "breakable", "message_width", "name_html", "wrap_long_words"]

_BREAK_AFTER = "./_-=:"
_SPACES = re.compile(r"(\s+)")


NAME_CHARS = 200  # a name in a label (a plot's legend): its head and tail, the middle cut past this
LINE_CHARS = 1000  # a status line that may quote names (a run's summary, an error)
_BREAKS = re.compile(r"([./_\-=:])")
_LONG_WORD = re.compile(r"\S{61,}")  # words a label may break: longer than 60 characters (short text as it is)


def breakable(text: str, limit: int = NAME_CHARS) -> str:
    """`text` for a word-wrapped label: cut to `limit` characters (middle elided) and with a break allowed
    after each `.`, `/`, `_`, `-`, `=`, `:` of a word over 60 characters (a zero-width space).

    A label wraps at spaces only, so it is as wide as its longest word: one tensor name of 200,000
    characters made a plot's legend, and the window with it, 1.5 million pixels wide (and every paint of
    it seconds long)."""
    return _LONG_WORD.sub(lambda word: _BREAKS.sub("\\1\u200b", word.group()), elide(text, limit))


def name_html(text: str, limit: int = NAME_CHARS) -> str:
    """`breakable(text)` as rich text: escaped, since a name from a file is text, never markup."""
    return escape(breakable(text, limit))


def message_width(widget: QWidget | None = None) -> int:
    """The widest line a message box shown over `widget` should hold: 3/4 of its screen's width (a box
    breaks paths after their slashes itself; this is for names it cannot break)."""
    screen = widget.screen() if widget is not None else QGuiApplication.primaryScreen()
    width = screen.availableGeometry().width() if screen is not None else 800
    return max(240, int(width * 0.75))


def wrap_long_words(text: str, metrics: QFontMetrics, width: int) -> str:
    """`text` with every word wider than `width` pixels broken onto lines that fit (spaces kept as they are);
    a word's first piece stays on the line it starts on (after a list's bullet, say)."""
    lines = []
    for line in text.split("\n"):
        parts, before = [], ""
        for part in _SPACES.split(line):
            parts.append(_break_word(part, metrics, width, metrics.horizontalAdvance(before)))
            before = parts[-1].rsplit("\n", 1)[-1] if "\n" in parts[-1] else before + part
        lines.append("".join(parts))
    return "\n".join(lines)


def _break_word(word: str, metrics: QFontMetrics, width: int, start: int = 0) -> str:
    """`word` broken onto lines of `width` pixels, the first of them `start` pixels shorter."""
    if not word or word.isspace() or metrics.horizontalAdvance(word) <= width:
        return word
    lines: list[str] = []
    rest = word
    room = max(width - start, width // 3)
    while rest and metrics.horizontalAdvance(rest) > room:
        end = _fitting_prefix(rest, metrics, room)
        cut = max((rest.rfind(c, 0, end) for c in _BREAK_AFTER), default=-1) + 1
        if cut < end // 2:  # no break character in the line's second half: cut where the room ends
            cut = end
        lines.append(rest[:cut])
        rest = rest[cut:]
        room = width
    return "\n".join([*lines, rest] if rest else lines)


def _fitting_prefix(text: str, metrics: QFontMetrics, width: int) -> int:
    """The number of characters of `text` that fit in `width` pixels (at least one)."""
    low, high = 1, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if metrics.horizontalAdvance(text[:middle]) <= width:
            low = middle
        else:
            high = middle - 1
    return low
