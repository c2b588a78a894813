"""Words too long for a message box's line are broken onto lines, every character kept (issue 35)."""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontMetrics

from ckptview.gui.base.wrap import wrap_long_words


def test_long_words_are_broken_after_a_separator_and_nothing_is_lost(qapp):
    metrics = QFontMetrics(QFont())
    name = "model." + "very_long_module_name_" * 20 + "weight"
    text = f"/home/someone/run/last.pt\nLoading it imports and runs:\n  • {name}\n  • collections.OrderedDict"
    wrapped = wrap_long_words(text, metrics, 300)
    assert wrapped.replace("\n", "") == text.replace("\n", "")
    lines = wrapped.split("\n")
    assert all(metrics.horizontalAdvance(line) <= 300 for line in lines if " " not in line.strip())
    assert lines[:2] == text.split("\n")[:2] and lines[-1] == "  • collections.OrderedDict"
    assert lines[2].startswith("  • model.very_long") and metrics.horizontalAdvance(lines[2]) <= 300  # by its bullet
    assert all(line.endswith("_") for line in lines[2:-2])  # broken after a separator
    assert wrap_long_words("x" * 200, metrics, 100).count("\n") >= 2  # none there: where the room ends
