"""Which rows of a checkpoint's tree hold NaN or Inf, as far as figures computed so far know (Qt-free).

A NaN counted for a whole model (the Statistics of its top row) is found in one of its tensors; the tree
marks that tensor and every module row above it. Only summaries already computed are looked at: nothing
is read here, and a walk over the rows is off the GUI thread (a worker runs it).
"""

from __future__ import annotations

from collections.abc import Iterable

from ckptview.core.figures.analysis import Analysis
from ckptview.core.inspect.grouping import Row

__all__ = ["nonfinite_marks"]


def nonfinite_marks(rows: Iterable[Row], analysis: Analysis) -> dict[int, tuple[int, int]]:
    """id(row) -> (NaN count, ±Inf count) of every row whose tensors' computed summaries count some: the
    tensor rows, and each row above them with the sums below it."""
    marks: dict[int, tuple[int, int]] = {}
    counted: set[tuple[int, int]] = set()  # (row, tensor): a tied weight under two names counts once above
    for row in rows:
        node = row.node
        info = node.tensor if node is not None and node.kind == "tensor" else None
        summary = analysis.cached_summary(info) if info is not None else None
        if summary is None:
            continue
        stats = summary.stats
        nan, inf = stats.nan, stats.posinf + stats.neginf
        if not (nan or inf):
            continue
        up: Row | None = row
        while up is not None and up.parent is not None:  # the invisible top row has no mark of its own
            if (id(up), id(info)) not in counted:
                counted.add((id(up), id(info)))
                old = marks.get(id(up), (0, 0))
                marks[id(up)] = (old[0] + nan, old[1] + inf)
            up = up.parent
    return marks
