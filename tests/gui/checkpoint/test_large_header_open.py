"""A huge safetensors header opens off the GUI thread in pieces: the tab shows how far it got, and
Cancel stops the read between two pieces instead of waiting for it to end."""

from __future__ import annotations

import threading

import pytest
import torch
from safetensors.torch import save_file

from ckptview.core.jobs import Progress
from ckptview.core.read.formats import safetensors_file
from ckptview.gui.base.workers import wait_for_workers
from ckptview.gui.checkpoint.tab import CheckpointTab
from tests.support.guihelpers import wait_settled


def _wide(path: str, count: int) -> str:
    save_file({f"layers.{i}.weight": torch.full((2,), float(i)) for i in range(count)}, path)
    return path


@pytest.fixture
def steps(monkeypatch) -> list[tuple[Progress, str, int, int]]:
    """Every progress step a tab shows: (step, label text, bar maximum, bar value) after showing it."""
    seen: list[tuple[Progress, str, int, int]] = []
    show = CheckpointTab._on_open_progress

    def recording(self: CheckpointTab, step: Progress) -> None:
        show(self, step)
        seen.append((step, self.loading_label.text(), self.loading_bar.maximum(), self.loading_bar.value()))

    monkeypatch.setattr(CheckpointTab, "_on_open_progress", recording)
    monkeypatch.setattr(safetensors_file, "PIECE_BYTES", 512)  # a 12 KB header: some twenty pieces
    return seen


def test_open_anyway_shows_the_header_read_piece_by_piece(qtbot, window, tmp_path, steps, monkeypatch):
    import ckptview.core.session.opening as opening

    monkeypatch.setattr(opening, "PROGRESS_INTERVAL", 0.0)  # every piece's step reaches the tab
    window.settings.set_header_ask_bytes(2000)
    (tab,) = window.open_paths([_wide(str(tmp_path / "wide.safetensors"), 200)])
    wait_settled(qtbot, tab)
    assert tab.state == "asking" and not steps
    tab.open_anyway_button.click()
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    assert tab.top.tensors == 200
    reading = [s for s in steps if s[0].total > 0]
    assert len(reading) > 10
    assert all("reading the header" in text and "%" in text and maximum == 1000 for _s, text, maximum, _v in reading)
    values = [value for *_rest, value in reading]
    assert values == sorted(values) and values[-1] == 1000
    assert any(s.total == 0 and "arranging" in text for s, text, _m, _v in steps)  # then the tree is built


def test_progress_reaches_the_gui_thread_at_a_bounded_rate(qtbot, window, tmp_path, steps, monkeypatch):
    """One queued step per piece kept the GUI thread waiting for the interpreter lock: steps are spaced."""
    import ckptview.core.session.opening as opening

    monkeypatch.setattr(opening, "PROGRESS_INTERVAL", 1e9)  # nothing but the first and the last step
    window.settings.set_header_ask_bytes(None)
    (tab,) = window.open_paths([_wide(str(tmp_path / "wide.safetensors"), 200)])
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    reading = [s for s, *_rest in steps if s.total > 0]
    assert 1 <= len(reading) <= 2 and reading[-1].done == reading[-1].total


def test_cancel_stops_reading_the_header_between_two_pieces(qtbot, window, tmp_path, steps, monkeypatch):
    pieces = safetensors_file.header_pieces
    go_on = threading.Event()
    read: list[int] = []

    def held_after_the_first(raw: bytes, piece_bytes: int):
        for n, item in enumerate(pieces(raw, piece_bytes)):
            read.append(n)
            yield item
            if n == 0:
                go_on.wait(60)  # far from any normal wait: the test sets it as soon as it has cancelled

    monkeypatch.setattr(safetensors_file, "header_pieces", held_after_the_first)
    path = _wide(str(tmp_path / "wide.safetensors"), 200)
    total = sum(1 for _ in pieces(safetensors_file.read_header_bytes(path)[0], 512))
    window.settings.set_header_ask_bytes(None)
    (tab,) = window.open_paths([path])
    qtbot.waitUntil(lambda: bool(steps), timeout=10_000)  # the first piece is read and shown
    assert tab.state == "loading" and "reading the header" in tab.loading_label.text()
    tab.cancel()
    go_on.set()
    assert wait_for_workers(30_000)
    assert tab.state == "error" and "cancelled" in tab.error_text
    assert tab.checkpoint is None
    assert total > 10 and len(read) <= 2  # stopped at the next piece, not at the end of the header
    assert window.isVisible()


def test_cancel_while_arranging_stops_before_the_next_step(qtbot, window, tmp_path, steps, monkeypatch):
    import ckptview.core.session.opening as opening

    grouped, labelled, closed = threading.Event(), [], []
    go_on = threading.Event()
    group_tree = opening.group_tree

    def held_grouping(root, *args, **kwargs):
        top = group_tree(root, *args, **kwargs)
        grouped.set()
        go_on.wait(60)  # far from any normal wait: the test sets it as soon as it has cancelled
        return top

    real_close = opening.Checkpoint.close
    monkeypatch.setattr(opening, "group_tree", held_grouping)
    monkeypatch.setattr("ckptview.core.inspect.optimizer.label_state_rows", lambda *a: labelled.append(a))
    monkeypatch.setattr(opening.Checkpoint, "close", lambda self: (closed.append(self), real_close(self)))
    window.settings.set_header_ask_bytes(None)
    (tab,) = window.open_paths([_wide(str(tmp_path / "wide.safetensors"), 200)])
    qtbot.waitUntil(grouped.is_set, timeout=10_000)
    tab.cancel()
    go_on.set()
    assert wait_for_workers(30_000)
    assert tab.state == "error" and "cancelled" in tab.error_text
    assert not labelled and len(closed) == 1  # the next step never ran; the file was let go
