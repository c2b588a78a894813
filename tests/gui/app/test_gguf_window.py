"""A GGUF file in the window: dropped on it or opened, its tensors and their blocks are the tree, the quantized
weights counted as parameters, the metadata listed, and the open dialog offers `*.gguf`."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from ckptview.gui.app.main_window import FILE_FILTER
from tests.support.gguf_files import blocks_of, write_gguf
from tests.support.guihelpers import wait_settled


@pytest.fixture
def gguf_file(tmp_path) -> str:
    rng = np.random.default_rng(0)
    tensors = {"token_embd.weight": (rng.standard_normal((16, 256)).astype(np.float16), "F16"),
               "blk.0.attn_q.weight": (blocks_of("Q4_K", np.zeros((8, 256), np.float32), rng), "Q4_K"),
               "blk.0.attn_norm.weight": (np.ones(256, np.float32), "F32")}
    return str(write_gguf(tmp_path / "tiny.gguf", tensors, "llama", {"llama.context_length": 2048}))


def test_a_dropped_gguf_file_opens_as_its_tensors(qtbot, window, gguf_file):
    assert "*.gguf" in FILE_FILTER
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(gguf_file)])
    window.event(QDropEvent(QPointF(40, 40), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier))
    qtbot.waitUntil(lambda: window.tabs.count() == 1)
    tab = window.current_tab()
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert tab.checkpoint.format == "gguf"
    assert tab.summary.facts["Parameters"] == f"{16 * 256 + 8 * 256 + 256:,}"
    labels = [tab.model.index(r, 0).data() for r in range(tab.model.rowCount())]
    assert {"token_embd", "blk", "metadata"} <= set(labels)
