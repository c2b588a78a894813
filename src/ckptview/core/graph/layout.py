"""A layered (Sugiyama) layout of a graph view, by a library made for it: Graphviz's dot or igraph.

The view's boxes are placed top to bottom in layers, edges routed through the layers they cross. Which
library runs is the one installed (`engines()`), the faster first (`docs/benchmarks.md`: igraph's C
Sugiyama lays out a 20,000-node view in seconds, where dot takes minutes); both are the optional extra
`graph`. A layout is a plain function of the view, run in a worker: `layout(view, token=...)` checks the token
between its steps, and dot (a child process) is killed when it is cancelled. `LayoutCache` keeps the last
layouts by expanded set, so collapsing back to a view seen before costs nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any, TypeVar

from ckptview.core.errors import Cancelled
from ckptview.core.graph.collapse import GROUP, Item, View
from ckptview.core.jobs import CancelToken

CHAR_W, NODE_H, GROUP_H, PAD_X = 7.0, 34.0, 40.0, 18.0  # box sizes in scene units (about pixels)
H_GAP, V_GAP, FRAME_PAD, TITLE_H = 16.0, 34.0, 10.0, 16.0
# An edge from a box read by more than FAN_OUT others (rotary cos/sin, the attention mask: read by every
# layer) that spans more than LONG layers is drawn straight instead of routed through every layer it crosses:
# routed, 3 such boxes of a 200-layer model put a million bends in the layout (dot ran past 10 minutes on a
# 222-box view, igraph drew it 30,000 units wide). Layers are still those of every edge (`layers_of`).
FAN_OUT, LONG = 4, 6
MAX_CHARS = 40  # a box's line is cut past this many characters
GROUP_MARK = "   +"  # the end of a closed module's second line: its corner that opens it on a click
WRAP = 8  # boxes with no edge (a module tree) are set in rows of this many
INSTALL_HINT = "pip install 'ckptview[graph]'"
# igraph 1.0's Sugiyama (Brandes-Koepf placement) recurses once per vertex of a chain of blocks, up to every
# vertex of its widest layer, dummies included: 144-146 bytes of C stack each, measured here (a 2 MiB thread
# stack holds 14,500, 1 MiB 7,159; a 65,000-wide layer in an 8 MiB pool thread crashed the window). A part of
# more than MAX_SUGIYAMA_VERTICES (boxes + dummies) is laid out by `layered` instead; igraph runs in a thread
# of LAYOUT_STACK bytes, over 4x what the cap needs (tests/core/graph/test_layout_stack.py proves it in a child).
SUGIYAMA_FRAME = 146
MAX_SUGIYAMA_VERTICES = 50_000
LAYOUT_STACK = 32 << 20
T = TypeVar("T")
Rect = tuple[float, float, float, float]  # x, y (top left), width, height
Point = tuple[float, float]


class NoLayoutEngine(RuntimeError):
    """No layout library is installed; the message says how to install one."""


@dataclass(frozen=True)
class Placed:
    """A laid-out view: a box per item, a polyline per edge (as `view.edges`), a frame per expanded module."""

    boxes: list[Rect]
    edges: list[list[Point]]
    frames: list[Rect]
    width: float
    height: float
    engine: str
    straight: frozenset[int] = frozenset()  # edges drawn straight (from a box many read: see FAN_OUT)


def item_size(item: Item) -> tuple[float, float]:
    """The box an item needs for its two lines of text (a closed module's second line ends in its mark)."""
    chars = max(len(item.label), len(item.detail) + (len(GROUP_MARK) if item.kind == GROUP else 0), 4)
    if item.kind == GROUP or item.detail:
        return min(chars, MAX_CHARS) * CHAR_W + PAD_X, GROUP_H
    return min(chars, MAX_CHARS) * CHAR_W + PAD_X, NODE_H


def engines() -> list[str]:
    """The layout libraries installed, the preferred first."""
    found = []
    if importlib.util.find_spec("igraph") is not None:
        found.append("igraph")
    if dot_command() is not None:
        found.append("dot")
    return found


def dot_command() -> str | None:
    """The dot program: graphviz-pure's, beside this Python first, else Graphviz's `dot` on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "graphviz-pure")
    if os.path.exists(here):
        return here
    return shutil.which("graphviz-pure") or shutil.which("dot")


def layout(view: View, engine: str | None = None, token: CancelToken | None = None) -> Placed:
    """Lay `view` out with `engine` (None: the first of `engines()`); raises NoLayoutEngine without one."""
    token = token or CancelToken()
    available = engines()
    if engine is None:
        if not available:
            raise NoLayoutEngine(f"no layout library is installed: {INSTALL_HINT}")
        engine = available[0]
    sizes = [item_size(item) for item in view.items]
    token.check()
    if not view.items:
        return Placed([], [], [], 0.0, 0.0, engine)
    layer = layers_of(len(view.items), view.edges)
    token.check()
    routed = routed_edges(view, layer)
    if engine == "igraph":
        boxes, lines = _igraph(view, layer, routed, sizes, token)
    elif engine == "dot":
        boxes, lines = _dot(view, routed, sizes, token)
    else:
        raise ValueError(f"unknown layout engine {engine!r}")
    token.check()
    edges: list[list[Point]] = []
    straight: set[int] = set()
    for e, (a, b, _) in enumerate(view.edges):
        line = lines.get(e)
        if line is None:  # a broadcast edge: straight from the bottom of its source to the top of its reader
            (ax, ay, aw, ah), (bx, by, bw, _) = boxes[a], boxes[b]
            line = [(ax + aw / 2, ay + ah), (bx + bw / 2, by)]
            straight.add(e)
        edges.append(line)
    frames = _frames(view, boxes)
    right = max([x + w for x, _, w, _ in boxes] + [x + w for x, _, w, _ in frames])
    bottom = max([y + h for _, y, _, h in boxes] + [y + h for _, y, _, h in frames])
    return Placed(boxes, edges, frames, right, bottom, engine, frozenset(straight))


def layers_of(count: int, edges: list[tuple[int, int, int]]) -> list[int]:
    """Each box's layer: the longest path to it from a box no edge enters (a cycle, which aggregated modules
    can make, is broken at the box that comes first)."""
    ins = [0] * count
    outs: list[list[int]] = [[] for _ in range(count)]
    for a, b, _ in edges:
        outs[a].append(b)
        ins[b] += 1
    layer = [0] * count
    done = [False] * count
    ready = [i for i in range(count) if ins[i] == 0]
    next_stuck = 0
    finished = 0
    while finished < count:
        if not ready:  # a cycle: take the first box left, as if its remaining inputs were not there
            while done[next_stuck] or ins[next_stuck] == 0 and next_stuck in ready:
                next_stuck += 1
            ready.append(next_stuck)
            ins[next_stuck] = 0
        i = ready.pop()
        if done[i]:
            continue
        done[i] = True
        finished += 1
        for b in outs[i]:
            if not done[b]:
                layer[b] = max(layer[b], layer[i] + 1)
                ins[b] -= 1
                if ins[b] == 0:
                    ready.append(b)
    return layer


def routed_edges(view: View, layer: list[int]) -> list[int]:
    """The edges the layout engine routes: all but the long edges of a box with many readers."""
    fan: dict[int, int] = {}
    for a, _, _ in view.edges:
        fan[a] = fan.get(a, 0) + 1
    return [e for e, (a, b, _) in enumerate(view.edges)
            if fan[a] <= FAN_OUT or abs(layer[b] - layer[a]) <= LONG]


def _frames(view: View, boxes: list[Rect]) -> list[Rect]:
    """Each expanded module's frame: around its items and the frames inside it, with a strip on top for its
    title above everything inside (a frame's title never lies over a nested frame's)."""
    index = {path: f for f, (path, _) in enumerate(view.frames)}
    inner: dict[int, list[int]] = {}
    for f, (path, _) in enumerate(view.frames):
        at = path
        while "." in at:  # the nearest expanded module above, walked up a level at a time
            at = at.rpartition(".")[0]
            if at in index:
                inner.setdefault(index[at], []).append(f)
                break
    rects: list[Rect] = [(0.0, 0.0, 0.0, 0.0)] * len(view.frames)
    for f in sorted(range(len(view.frames)), key=lambda k: -view.frames[k][0].count(".")):  # deepest first
        parts = [boxes[i] for i in view.frames[f][1]] + [rects[g] for g in inner.get(f, []) if rects[g][2] > 0]
        if not parts:
            continue
        left = min(x for x, _, _, _ in parts) - FRAME_PAD
        top = min(y for _, y, _, _ in parts) - FRAME_PAD - TITLE_H
        right = max(x + w for x, _, w, _ in parts) + FRAME_PAD
        bottom = max(y + h for _, y, _, h in parts) + FRAME_PAD
        rects[f] = (left, top, right - left, bottom - top)
    return rects


# ------------------------------------------------------------------------------------------------------
# igraph: Sugiyama in C (layering, crossing reduction, Brandes-Koepf placement), in unit spacing. Layers
# are then spaced by the tallest box and each layer packed left to right with the real box widths.


def import_igraph() -> ModuleType:
    """igraph, imported without matplotlib: its drawing module imports matplotlib.pyplot when it can (most
    of igraph's import: 2 s of a first paint on a busy machine, and a GUI backend chosen from a worker
    thread); a layout never draws. Its import falls back to a stand-in module when matplotlib is not there."""
    found = sys.modules.get("igraph")
    if found is not None:
        return found
    block = "matplotlib" not in sys.modules
    if block:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]  # `import matplotlib` raises ImportError
    try:
        import igraph
    finally:
        if block and sys.modules.get("matplotlib", 0) is None:
            del sys.modules["matplotlib"]
    module: ModuleType = igraph
    return module


def _igraph(view: View, layer: list[int], routed: list[int], sizes: list[tuple[float, float]], token: CancelToken
            ) -> tuple[list[Rect], dict[int, list[Point]]]:
    igraph = import_igraph()

    count = len(view.items)
    pairs = [view.edges[e][:2] for e in routed]
    # Each connected part is laid out alone, and boxes with no edge are set in rows of WRAP: igraph 1.0's
    # Sugiyama with given layers corrupts its memory on a graph of several parts (garbage routes, then a
    # segmentation fault) where each part alone is laid out right.
    points: list[tuple[float, float]] = [(0.0, 0.0)] * count
    bends: list[list[int]] = [[] for _ in routed]
    offset = 0.0
    alone: list[int] = []
    for members, edges in _parts(count, pairs):
        if not edges:
            alone.extend(members)
            continue
        local = {v: k for k, v in enumerate(members)}
        local_pairs = [(local[a], local[b]) for a, b in (pairs[e] for e in edges)]
        local_layers = [layer[v] for v in members]
        token.check()
        if sugiyama_size(local_layers, local_pairs) <= MAX_SUGIYAMA_VERTICES:
            coords, routing = _in_sized_thread(partial(_sugiyama, igraph, local_layers, local_pairs), token)
        else:  # past what igraph's recursion is proven to hold (see MAX_SUGIYAMA_VERTICES): layered by hand
            coords, routing = layered(local_layers, local_pairs), [[] for _ in local_pairs]
        token.check()
        xs = [float(x) for x, _ in coords]
        left = min(xs)
        for v, x in zip(members, xs, strict=True):
            points[v] = (x - left + offset, float(layer[v]))
        right = max(xs) - left + offset
        for e, route in zip(edges, routing, strict=True):
            # One bend per layer strictly between the edge's ends (whatever else a route may hold).
            a, b = pairs[e]
            low, high = sorted((layer[a], layer[b]))
            seen: dict[int, tuple[float, float]] = {}
            for x, y in route:
                row = round(y)
                if low < row < high:
                    seen.setdefault(row, (float(x) - left + offset, float(row)))
                    right = max(right, float(x) - left + offset)
            ordered = sorted(seen.values(), key=lambda pt: pt[1], reverse=layer[a] > layer[b])
            bends[e] = list(range(len(points), len(points) + len(ordered)))
            points.extend(ordered)
        offset = right + 2
    for k, v in enumerate(alone):
        points[v] = (offset + k % WRAP, float(k // WRAP))
    width = [sizes[i][0] if i < count else 0.0 for i in range(len(points))]
    unit = sorted(w for w, _ in sizes)[len(sizes) // 2] * 0.6 + H_GAP
    layers: dict[int, list[int]] = {}
    for i, (_, y) in enumerate(points):
        layers.setdefault(round(y), []).append(i)
    xs = [0.0] * len(points)
    ys = [0.0] * len(points)
    top = 0.0
    for row in sorted(layers):
        members = sorted(layers[row], key=lambda i: points[i][0])
        tallest = max((sizes[i][1] for i in members if i < count), default=NODE_H * 0.5)
        right = -1e18
        for i in members:  # left to right in igraph's order, no box closer than H_GAP to the one before
            left = max(points[i][0] * unit, right + (H_GAP if width[i] else H_GAP / 2))
            xs[i] = left + width[i] / 2
            right = left + width[i]
            ys[i] = top + tallest / 2
        top += tallest + V_GAP
        token.check()
    boxes = [(xs[i] - sizes[i][0] / 2, ys[i] - sizes[i][1] / 2, sizes[i][0], sizes[i][1]) for i in range(count)]
    lines: dict[int, list[Point]] = {}
    for k, e in enumerate(routed):
        a, b, _ = view.edges[e]
        line = [(xs[a], ys[a] + sizes[a][1] / 2)]
        line.extend((xs[d], ys[d]) for d in bends[k])
        line.append((xs[b], ys[b] - sizes[b][1] / 2))
        lines[e] = line
    return boxes, lines


def sugiyama_size(layers: list[int], pairs: list[tuple[int, int]]) -> int:
    """The vertices igraph's Sugiyama places for a part: its boxes and one dummy per layer an edge crosses."""
    return len(layers) + sum(max(0, abs(layers[b] - layers[a]) - 1) for a, b in pairs)


def _sugiyama(igraph: ModuleType, layers: list[int], pairs: list[tuple[int, int]]
              ) -> tuple[list[tuple[float, float]], list[list[tuple[float, float]]]]:
    graph = igraph.Graph(n=len(layers), edges=pairs, directed=True)
    placed = graph.layout_sugiyama(layers=layers, maxiter=40)
    return [tuple(c) for c in placed.coords], [list(map(tuple, r)) for r in placed.edge_routing]


_STACK_LOCK = threading.Lock()


def _in_sized_thread(work: Callable[[], T], token: CancelToken) -> T:
    """`work()` in a thread of its own with a `LAYOUT_STACK` stack, whatever thread calls: igraph's C recursion
    needs the room its vertex cap was measured with, which a pool thread (8 MiB here, 512 KiB on macOS) or the
    main thread may not have. Cancel returns at once (the thread finishes its C call and is dropped)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result["error"] = exc

    with _STACK_LOCK:  # the size is the process's setting for new threads: set for this one only
        previous = threading.stack_size(LAYOUT_STACK)
        try:
            thread = threading.Thread(target=run, name="ckptview-layout", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous)
    while thread.is_alive():
        thread.join(0.05)
        if token.cancelled:
            raise Cancelled("cancelled")
    if "error" in result:
        raise result["error"]
    value: T = result["value"]
    return value


def layered(layers: list[int], pairs: list[tuple[int, int]]) -> list[tuple[float, float]]:
    """A layered placement without a library, for parts past igraph's proven size: each layer's boxes ordered
    by the mean place of the boxes they read (one sweep down), side by side. Linear in boxes and edges (plus
    the sort of each layer); edges are drawn straight."""
    count = len(layers)
    ins: list[list[int]] = [[] for _ in range(count)]
    for a, b in pairs:
        if layers[a] < layers[b]:
            ins[b].append(a)
    rows: dict[int, list[int]] = {}
    for v in range(count):
        rows.setdefault(layers[v], []).append(v)
    place = [0.0] * count
    for row in sorted(rows):
        members = rows[row]
        keys = {v: (sum(place[u] for u in ins[v]) / len(ins[v]) if ins[v] else float(v)) for v in members}
        members.sort(key=lambda v: keys[v])
        for rank, v in enumerate(members):
            place[v] = float(rank)
    return [(place[v], float(layers[v])) for v in range(count)]


def _parts(count: int, pairs: list[tuple[int, int]]) -> list[tuple[list[int], list[int]]]:
    """The weakly connected parts of a graph: (their vertices, their edges' indices), in vertex order."""
    root = list(range(count))

    def find(v: int) -> int:
        while root[v] != v:
            root[v] = root[root[v]]
            v = root[v]
        return v

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            root[max(ra, rb)] = min(ra, rb)
    members: dict[int, list[int]] = {}
    for v in range(count):
        members.setdefault(find(v), []).append(v)
    edges: dict[int, list[int]] = {}
    for e, (a, _) in enumerate(pairs):
        edges.setdefault(find(a), []).append(e)
    return [(vs, edges.get(r, [])) for r, vs in members.items()]


# ------------------------------------------------------------------------------------------------------
# dot: Graphviz's network-simplex layering and placement, each expanded module a cluster, run as a child
# process (killed when the layout is cancelled); `-Tplain` gives the positions and the edges' splines.


def _dot(view: View, routed: list[int], sizes: list[tuple[float, float]], token: CancelToken
         ) -> tuple[list[Rect], dict[int, list[Point]]]:
    command = dot_command()
    if command is None:
        raise NoLayoutEngine(f"the dot program is not installed: {INSTALL_HINT}")
    text = dot_source(view, routed, sizes)
    out = _run_cancellable([command, "-Tplain"], text.encode(), token)
    return _parse_plain(out.decode(), view, routed, sizes)


def dot_source(view: View, routed: list[int], sizes: list[tuple[float, float]]) -> str:
    """The view as a DOT graph of fixed-size boxes, each expanded module a nested cluster."""
    lines = ["digraph g {", "graph [rankdir=TB, nodesep=0.2, ranksep=0.45, splines=polyline, "
             "newrank=true, mclimit=0.5, searchsize=20];", 'node [shape=box, fixedsize=true, label=""];']
    deepest: dict[int, int] = {}  # item -> deepest frame holding it
    for f, (_, members) in enumerate(view.frames):  # frames come shallow first: later ones are deeper
        for i in members:
            deepest[i] = f
    inside: dict[int, list[int]] = {}
    for i, f in deepest.items():
        inside.setdefault(f, []).append(i)
    children: dict[int | None, list[int]] = {}
    paths = [p for p, _ in view.frames]
    index = {path: f for f, path in enumerate(paths)}
    for f, path in enumerate(paths):
        parent = None
        at = path
        while "." in at:  # the nearest expanded module above, walked up one level at a time
            at = at.rpartition(".")[0]
            if at in index:
                parent = index[at]
                break
        children.setdefault(parent, []).append(f)

    def node(i: int) -> str:
        w, h = sizes[i]
        return f"i{i} [width={w / 72:.3f}, height={h / 72:.3f}];"

    stack: list[int | str] = [f for f in reversed(children.get(None, []))]
    while stack:  # explicit: frames nest as deep as module paths do
        entry = stack.pop()
        if isinstance(entry, str):
            lines.append(entry)
            continue
        lines.append(f"subgraph cluster_{entry} {{ margin=12;")
        lines.extend(node(i) for i in inside.get(entry, []))
        stack.append("}")
        stack.extend(reversed(children.get(entry, [])))

    lines.extend(node(i) for i in range(len(view.items)) if i not in deepest)
    lines.extend(f"i{view.edges[e][0]} -> i{view.edges[e][1]};" for e in routed)
    lines.append("}")
    return "\n".join(lines)


def _run_cancellable(command: list[str], data: bytes, token: CancelToken) -> bytes:
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    result: dict[str, bytes] = {}

    def talk() -> None:
        result["out"], result["err"] = proc.communicate(data)

    thread = threading.Thread(target=talk, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.05)
        if token.cancelled:
            proc.kill()
            thread.join()
            raise Cancelled("cancelled")
    if proc.returncode != 0:
        raise RuntimeError(f"dot failed: {result.get('err', b'').decode(errors='replace').strip()[:200]}")
    return result["out"]


def _parse_plain(text: str, view: View, routed: list[int], sizes: list[tuple[float, float]]
                 ) -> tuple[list[Rect], dict[int, list[Point]]]:
    height = 0.0
    centres: dict[int, Point] = {}
    routes: dict[tuple[int, int], list[Point]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "graph":
            height = float(parts[3]) * 72
        elif parts[0] == "node":
            centres[int(parts[1][1:])] = (float(parts[2]) * 72, height - float(parts[3]) * 72)
        elif parts[0] == "edge":
            n = int(parts[3])
            pts = [(float(parts[4 + 2 * k]) * 72, height - float(parts[5 + 2 * k]) * 72) for k in range(n)]
            routes[(int(parts[1][1:]), int(parts[2][1:]))] = pts
    boxes = [(centres[i][0] - sizes[i][0] / 2, centres[i][1] - sizes[i][1] / 2, sizes[i][0], sizes[i][1])
             for i in range(len(view.items))]
    lines = {e: routes.get(view.edges[e][:2]) or [centres[view.edges[e][0]], centres[view.edges[e][1]]]
             for e in routed}
    return boxes, lines


# ------------------------------------------------------------------------------------------------------


class LayoutCache:
    """The last few layouts, by expanded set and engine: going back to a view seen before is immediate."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._placed: OrderedDict[tuple[Hashable, str | None], Placed] = OrderedDict()

    def get(self, key: Hashable, engine: str | None = None) -> Placed | None:
        """The layout kept for this view's key (its expanded set and mode), if any."""
        with self._lock:
            found = self._placed.get((key, engine))
            if found is not None:
                self._placed.move_to_end((key, engine))
            return found

    def put(self, key: Hashable, engine: str | None, placed: Placed) -> None:
        """Keep a layout (the oldest goes past `keep`)."""
        with self._lock:
            self._placed[(key, engine)] = placed
            self._placed.move_to_end((key, engine))
            while len(self._placed) > self.keep:
                self._placed.popitem(last=False)

    def layout(self, view: View, engine: str | None = None, token: CancelToken | None = None,
               run: Callable[[View, str | None, CancelToken | None], Placed] = layout) -> Placed:
        """The cached layout of `view`, or a new one (kept)."""
        found = self.get(view.key, engine)
        if found is None:
            found = run(view, engine, token)
            self.put(view.key, engine, found)
        return found
