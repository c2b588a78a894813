"""The Graph view on files that ask for more work than their bytes pay for (issue 43): the refusal is the
core's one line, and Cancel stops a walk in its pool thread (it sat on "Reading..." at 100% of a core)."""

from __future__ import annotations

from pathlib import Path

from ckptview.gui.base.workers import wait_for_workers
from tests.support import graph_attacks
from tests.support.guihelpers import wait_settled


def _graph_page(qtbot, window, path: str):
    tab = window.open_paths([path])[0]
    wait_settled(qtbot, tab)
    assert tab.state == "ready", tab.error_text
    page = tab.show_graph(True)
    assert page is not None
    return page


def test_a_graph_past_the_budget_says_what_was_too_large(qtbot, window, tmp_path: Path) -> None:
    page = _graph_page(qtbot, window, graph_attacks.many_edges(tmp_path))
    qtbot.waitUntil(lambda: page.source_label.text().startswith("No graph:"), timeout=60_000)
    text = page.source_label.text()
    assert "the TorchScript code would take more than" in text and "nodes and edges" in text, text
    assert "\n" not in text and "Error" not in text


def test_cancel_stops_the_walk_in_its_thread(qtbot, window, tmp_path: Path) -> None:
    """2**30 inlined calls on an archive of 1 MB: half a minute of walking before its budget ends it (ten
    seconds on a quiet machine). Cancelled at once, the pool thread is free again well before that."""
    calls = "".join(f"  def f{i}(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
                    f"    _0 = (self).f{i + 1}(x, )\n    return (self).f{i + 1}(_0, )\n" for i in range(30))
    path = graph_attacks.script(tmp_path, "fan_out", calls + (
        "  def f30(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n    return x\n"
        "  def forward(self: __torch__.torch.nn.modules.linear.Linear, x: Tensor) -> Tensor:\n"
        "    return (self).f0(x, )\n"), features=80_000)
    page = _graph_page(qtbot, window, path)
    assert page.graph_slot.running
    page.cancel()
    assert "cancelled" in page.source_label.text()
    assert wait_for_workers(5_000), "the walk went on after Cancel"
