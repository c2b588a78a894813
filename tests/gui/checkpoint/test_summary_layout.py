"""The summary's facts at the sizes people use: every caption whole, no column drawn over another."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QLabel

from tests.support.guihelpers import wait_settled


@pytest.mark.parametrize("size", [(1024, 640), (1280, 800)])
def test_fact_captions_are_whole_and_columns_do_not_overlap(qtbot, window, state_dict_file, size):
    window.resize(*size)
    window.show()
    (tab,) = window.open_paths([state_dict_file])
    wait_settled(qtbot, tab)
    body = tab.summary.body
    qtbot.waitUntil(lambda: body.isVisible() and body.width() > 0, timeout=30_000)
    labels = [w for w in body.findChildren(QLabel) if w.isVisible() and w.text()]
    captions = [w for w in labels if w.text().endswith(":")]
    assert len(captions) >= 6
    for caption in captions:  # squeezed forms drew their captions 0 px wide, the values over them
        assert caption.width() >= caption.sizeHint().width(), caption.text()
    rects = [(w.text(), QRect(w.mapTo(body, w.rect().topLeft()), w.size())) for w in labels]
    for i, (a, ra) in enumerate(rects):
        for b, rb in rects[i + 1:]:
            assert not ra.intersects(rb), (a, b)
