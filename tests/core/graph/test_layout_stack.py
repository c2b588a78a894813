"""igraph's Sugiyama recurses in C once per vertex of its widest layer (issue 43, finding 8): a 65,000-box
layer killed the window (SIGSEGV in a pool thread of 8 MiB). The layout now runs igraph in a thread with a
stack it is proven to need, and lays out a part past `MAX_SUGIYAMA_VERTICES` without it. Each check runs in a
child process: a crash is its exit status, never this test run's."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from ckptview.core.graph import layout
from tests.support.layout_engines import needs_igraph

pytestmark = needs_igraph

# A star: one box read by `leaves` others, all in one layer (the widest layer a graph of that size can have).
STAR = textwrap.dedent("""
    import sys, threading
    from ckptview.core.graph.collapse import NODE, Item, View
    from ckptview.core.graph import layout
    leaves, stack = int(sys.argv[1]), int(sys.argv[2])
    items = [Item(f"n:{i}", NODE, "relu", "", "", node=i) for i in range(leaves + 1)]
    view = View(frozenset({""}), items, [(0, i, 1) for i in range(1, leaves + 1)], [])
    found = {}
    def run():
        found["placed"] = layout.layout(view, "igraph")
    threading.stack_size(stack)  # the calling thread's stack: a pool thread's, or less
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    placed = found["placed"]
    assert len(placed.boxes) == leaves + 1
    tops = {round(y) for _, y, _, _ in placed.boxes[1:]}
    assert len(tops) == 1 and placed.boxes[0][1] < min(tops)  # one layer, under the box they read
    print("laid out", flush=True)
""")


def _star(leaves: int, stack: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", STAR, str(leaves), str(stack)], capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_a_layer_of_65000_boxes_no_longer_crashes_a_pool_thread() -> None:
    """The issue's case: 65,000 boxes in one layer, laid out from a thread of 8 MiB (a pool thread's stack
    here). Before the fix the child died of SIGSEGV in igraph's recursion."""
    done = _star(65_000, 8 << 20)
    assert done.returncode != -signal.SIGSEGV, "igraph's recursion overflowed the stack"
    assert done.returncode == 0 and "laid out" in done.stdout, done.stderr[-2000:]


@pytest.mark.slow
def test_igraph_lays_out_a_part_at_the_cap_from_a_small_stack() -> None:
    """At the cap (its widest possible layer), igraph itself runs (no fallback) and holds in its own thread,
    whatever the caller's stack (512 KiB: less than a macOS pool thread's)."""
    assert layout.sugiyama_size([0] + [1] * (layout.MAX_SUGIYAMA_VERTICES - 1),
                                [(0, i) for i in range(1, layout.MAX_SUGIYAMA_VERTICES)]) == layout.MAX_SUGIYAMA_VERTICES
    done = _star(layout.MAX_SUGIYAMA_VERTICES - 1, 512 << 10)
    assert done.returncode == 0 and "laid out" in done.stdout, done.stderr[-2000:]


def test_the_thread_stack_holds_the_cap_with_room() -> None:
    """The measured 146 bytes a vertex, four times over, fit the layout thread's stack."""
    assert layout.MAX_SUGIYAMA_VERTICES * layout.SUGIYAMA_FRAME * 4 <= layout.LAYOUT_STACK


def test_past_the_cap_a_part_is_layered_without_igraph(monkeypatch) -> None:
    """A part larger than the cap never reaches igraph: it is layered by hand, every box placed in its layer."""
    from ckptview.core.graph.collapse import NODE, Item, View

    monkeypatch.setattr(layout, "MAX_SUGIYAMA_VERTICES", 10)

    def refuse(*args, **kwargs):
        raise AssertionError("igraph was called past the cap")

    monkeypatch.setattr(layout, "_sugiyama", refuse)
    items = [Item(f"n:{i}", NODE, "relu", "", "", node=i) for i in range(30)]
    edges = [(0, i, 1) for i in range(1, 20)] + [(i, 20 + i % 10, 1) for i in range(1, 20)]
    placed = layout.layout(View(frozenset({""}), items, edges, []), "igraph")
    assert len(placed.boxes) == 30
    for a, b, _ in edges:
        assert placed.boxes[a][1] < placed.boxes[b][1]
    rows: dict[float, list] = {}
    for x, y, w, _ in placed.boxes:
        rows.setdefault(y, []).append((x, x + w))
    for spans in rows.values():  # side by side, never over each other
        spans.sort()
        assert all(right <= left for (_, right), (left, _) in zip(spans, spans[1:], strict=False))
