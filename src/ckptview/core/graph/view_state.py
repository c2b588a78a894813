"""What the window's Graph view shows and why, without Qt: the state `GraphPage` renders.

One object holds the view's status (`Status`: loading, ready, failed, cancelled), the graph once read, the mode
(the architecture view, or every op), the modules open and pinned, the boxes selected, the search's matches,
and what was asked before the graph was there: a tensor selected before the graph finished loading is shown
(its node outlined, its module opened) as soon as the graph is ready, never dropped.

Opening a module closes the others (one open module at a time, with the modules above it), unless they are
pinned. The keyboard moves between boxes along the drawing: up and down follow the edges into and out of a
box (the nearest by x), left and right go to the next box of its row; Enter opens a module, Backspace closes
the one around the current box.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from ckptview.core.graph.blocks.folding import first_view
from ckptview.core.graph.collapse import ALL_OPS, ARCHITECTURE, GROUP, Hierarchy, View, parent_path
from ckptview.core.graph.overlay import BoxFigure, Figure, describe
from ckptview.core.units import plural

Rect = tuple[float, float, float, float]


class Status(enum.Enum):
    """Where the view is: nothing asked yet, reading the graph, showing it, or why there is none."""

    IDLE = "idle"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Reveal:
    """What to lay out to show something: the modules open, and the box to centre and outline."""

    expanded: frozenset[str]
    focus: str  # an item key


@dataclass
class ViewState:
    """The Graph view's state (see the module's docstring); the window renders it, tests drive it bare."""

    status: Status = Status.IDLE
    message: str = ""  # why there is no graph (FAILED), one line
    hierarchy: Hierarchy | None = None
    mode: str = ARCHITECTURE
    expanded: frozenset[str] = frozenset({""})
    pinned: frozenset[str] = frozenset()
    selected: list[str] = field(default_factory=list)  # item keys
    pending: list[str] = field(default_factory=list)  # checkpoint keys asked for before the graph was ready
    matches: list[int] = field(default_factory=list)  # node indices matching the search, in graph order
    match_at: int = -1

    # -- loading -------------------------------------------------------------------------------------------
    def loading(self) -> None:
        """The graph is being read."""
        self.status, self.message = Status.LOADING, ""

    def failed(self, message: str) -> None:
        """No graph: `message` says why."""
        self.status, self.message = Status.FAILED, message

    def cancelled(self) -> None:
        """Reading the graph was cancelled (it may be read again)."""
        self.status = Status.CANCELLED

    def may_read(self) -> bool:
        """The graph may be read: none is read nor being read (again after a failure or a cancel)."""
        return self.status not in (Status.LOADING, Status.READY)

    def ready(self, hierarchy: Hierarchy) -> Reveal | None:
        """The graph arrived: the first view's modules, or what a selection made while loading asks for."""
        self.hierarchy, self.status = hierarchy, Status.READY
        if self.mode == ARCHITECTURE and hierarchy.folding is None:
            self.mode = ALL_OPS
        self.expanded = self.first()
        pending, self.pending = self.pending, []
        return self.reveal_keys(pending) if pending else None

    def first(self) -> frozenset[str]:
        """The modules the mode's first view opens (the block diagram's, or the top level of every op)."""
        h = self.hierarchy
        if h is None:
            return frozenset({""})
        if self.mode == ARCHITECTURE and h.folding is not None:
            return first_view(h, h.folding)
        return h.top()

    # -- modules open ---------------------------------------------------------------------------------------
    def opened(self, path: str) -> frozenset[str]:
        """The modules open once `path` is opened: the modules above it and the pinned ones (with theirs) stay,
        the rest close (one open module at a time unless pinned)."""
        assert self.hierarchy is not None
        keep = set(self.base()) | {""}
        for pinned in self.pinned:
            keep |= set(self.hierarchy.chain(pinned))
        return frozenset(keep | set(self.hierarchy.chain(path)))

    def base(self) -> frozenset[str]:
        """What stays open whatever is opened: the first view's wrappers in the architecture view."""
        return self.first() if self.mode == ARCHITECTURE else frozenset({""})

    def closed(self, path: str) -> frozenset[str]:
        """The modules open once `path` (and what is inside it) is closed."""
        assert self.hierarchy is not None
        self.pinned = frozenset(p for p in self.pinned if p != path and not p.startswith(path + "."))
        return self.hierarchy.collapse(self.expanded, path)

    def toggle_pin(self, path: str) -> bool:
        """Pin module `path` open (or unpin it); whether it is pinned now."""
        self.pinned = self.pinned - {path} if path in self.pinned else self.pinned | {path}
        return path in self.pinned

    def set_mode(self, mode: str) -> frozenset[str]:
        """Switch between the architecture view and every op; the modules to open for it."""
        self.mode = mode if mode in (ALL_OPS, ARCHITECTURE) else ARCHITECTURE
        return self.first()

    # -- revealing nodes ------------------------------------------------------------------------------------
    def reveal_node(self, index: int) -> Reveal:
        """Open what shows node `index` as a box of its own, outlined (every op's view when the architecture
        view hides it: bookkeeping is shown on demand)."""
        h = self.hierarchy
        assert h is not None
        node = h.node(index)
        if self.mode == ARCHITECTURE and h.folding is not None and h.folding.hidden[index]:
            self.mode = ALL_OPS
        path = node.module
        while path and self._shown(path) <= 1:  # bounded: one step per level of a built module path  # a module of one op is that op's box: open the one above
            path = parent_path(path)
        return Reveal(self.opened(path) if path else self.expanded | {""}, "n:" + node.id)

    def _shown(self, path: str) -> int:
        h = self.hierarchy
        assert h is not None
        if self.mode == ARCHITECTURE and h.folding is not None:
            return h.folding.shown.get(path, 0)
        group = h.groups.get(path)
        return group.total if group is not None else 0

    def reveal_keys(self, keys: Sequence[str]) -> Reveal | None:
        """Select the node reading the first of `keys` any node reads, and what shows it (None: no node does);
        before the graph is ready, the keys wait for it."""
        if self.hierarchy is None:
            self.pending = list(keys)
            return None
        for key in keys:
            readers = self.hierarchy.readers.get(key)
            if readers:
                reveal = self.reveal_node(readers[0])
                self.selected = [reveal.focus]
                return reveal
        return None

    def keys_of(self, view: View | None, item_keys: Sequence[str]) -> list[str]:
        """The checkpoint keys the boxes of `item_keys` read (a module's: every node's inside it)."""
        h = self.hierarchy
        if h is None:
            return []
        index = view.index() if view is not None else {}
        found: dict[str, None] = {}
        for key in item_keys:
            kind, _, name = key.partition(":")
            if key in index and view is not None:
                found.update(dict.fromkeys(h.keys_of(view.items[index[key]])))
            elif kind == "g":
                found.update(dict.fromkeys(h.params_below(name)))
            elif name in h.by_id:
                found.update(dict.fromkeys(h.node(h.by_id[name]).params))
        return list(found)

    # -- search ---------------------------------------------------------------------------------------------
    def search(self, text: str) -> int:
        """Find the nodes whose name or op holds `text`; how many."""
        self.matches, self.match_at = [], -1
        needle = text.strip().lower()
        if needle and self.hierarchy is not None:
            self.matches = [i for i, n in enumerate(self.hierarchy.graph.nodes)
                            if needle in n.id.lower() or needle in n.op.lower()]
        return len(self.matches)

    def next_match(self) -> Reveal | None:
        """The next match, and what shows it."""
        if not self.matches or self.hierarchy is None:
            return None
        self.match_at = (self.match_at + 1) % len(self.matches)
        return self.reveal_node(self.matches[self.match_at])

    def match_key(self) -> str | None:
        """The item key of the current match."""
        if self.hierarchy is None or not 0 <= self.match_at < len(self.matches):
            return None
        return "n:" + self.hierarchy.node(self.matches[self.match_at]).id


def step(view: View, boxes: Sequence[Rect], current: int, direction: str) -> int:
    """The box the arrow `direction` ("up", "down", "left", "right") goes to from box `current` (itself when
    there is none that way): along an edge into (up) or out of (down) it, the nearest by x; else the nearest
    row above or below; left and right within its row."""
    if not 0 <= current < len(boxes):
        return 0 if boxes else -1
    x, y, w, h = boxes[current]
    cx, cy = x + w / 2, y + h / 2

    def centre(i: int) -> tuple[float, float]:
        bx, by, bw, bh = boxes[i]
        return bx + bw / 2, by + bh / 2

    if direction in ("up", "down"):
        linked = [a if direction == "up" else b for a, b, _ in view.edges if (b if direction == "up" else a) == current]
        if not linked:
            linked = [i for i in range(len(boxes)) if (centre(i)[1] < cy - 1 if direction == "up" else centre(i)[1] > cy + 1)]
            if linked:
                level = max(centre(i)[1] for i in linked) if direction == "up" else min(centre(i)[1] for i in linked)
                linked = [i for i in linked if abs(centre(i)[1] - level) < 1]
        return min(linked, key=lambda i: abs(centre(i)[0] - cx)) if linked else current
    same = [i for i in range(len(boxes)) if i != current and abs(centre(i)[1] - cy) < 1
            and (centre(i)[0] < cx if direction == "left" else centre(i)[0] > cx)]
    return min(same, key=lambda i: abs(centre(i)[0] - cx)) if same else current


def around(view: View, index: int) -> str | None:
    """The open module around box `index` (the one Backspace closes), None at the top."""
    item = view.items[index]
    path = item.path if item.kind != GROUP else parent_path(item.path)
    open_paths = {p for p, _ in view.frames}
    while path and path not in open_paths:  # bounded: one step per level of a built module path
        path = parent_path(path)
    return path or None


def describe_box(hierarchy: Hierarchy, view: View, index: int, figure: Figure | None = None,
                 box: BoxFigure | None = None, compared: str | None = None) -> list[str]:
    """The hover text of box `index`, as lines: what it is, its module, its output, what it reads, how a
    comparison found it (`compared`), its figure last."""
    item = view.items[index]
    if item.kind == GROUP:
        lines = [item.path, item.label]
        if item.repeat > 1:
            lines.append(f"{item.repeat} instances of one structure: {item.instances[0]} … {item.instances[-1]}")
        lines.append(f"{plural(item.count, 'op')}" + (f", {plural(item.folded, 'bookkeeping op')} folded"
                                                      if item.folded else "") + " (click + or double-click to open)")
    else:
        node = hierarchy.node(item.node)
        lines = [node.id, node.op, f"module: {node.module or '(top)'}"]
        if node.shape is not None:
            lines.append(f"output: {' x '.join(str(s) for s in node.shape)} {node.dtype or ''}".rstrip())
        if node.params:
            lines.append("reads: " + ", ".join(node.params[:4]) + (" …" if len(node.params) > 4 else ""))
    if compared is not None:
        lines.append(f"compared: {compared}")
    if figure is not None and box is not None:
        lines.append(describe(figure, box))
    return lines
