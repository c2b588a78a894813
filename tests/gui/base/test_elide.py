"""A long path or name never widens the window: it is cut in the middle, whole in the tooltip (issue 35)."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QWidget

from ckptview.gui.base.elide import ElidedLabel

LONG = "/home/someone/experiments/" + "a_very_long_run_name_" * 8 + "/checkpoints/step_000123.pt"


def test_an_elided_label_keeps_both_ends_and_the_whole_text_in_its_tooltip(qtbot):
    holder = QWidget()
    qtbot.addWidget(holder)
    label = ElidedLabel(LONG)
    QHBoxLayout(holder).addWidget(label)
    holder.resize(400, 40)
    holder.show()
    qtbot.waitUntil(lambda: label.width() > 0 and label.text() != LONG)
    assert holder.minimumSizeHint().width() < 200 and holder.width() == 400
    shown = label.text()
    assert shown.startswith("/home/") and shown.endswith("step_000123.pt") and "…" in shown
    assert label.toolTip() == LONG and label.whole_text() == LONG
    holder.resize(4000, 40)
    qtbot.waitUntil(lambda: label.text() == LONG)
    assert label.toolTip() == ""  # nothing is cut: nothing to add
