"""What each cell of the run's update heat-map (tensors x checkpoints) shows (Qt-free, no torch).

A cell is either a value on the colour scale (``VALUE``: log10 of the update ratio, clamped to ``floor``) or
one of the states below, each drawn in its own colour and named in the legend:

- ``ABSENT``: the tensor is not in that checkpoint;
- ``FIRST``: nothing to compare with (the run's first checkpoint, a tensor new or reshaped here, or the
  previous checkpoint unreadable);
- ``UNCHANGED``: not one value differs from the previous checkpoint;
- ``NAN`` / ``INF``: the tensor holds NaN (or, without NaN, +-Inf) values there, whatever its ratio;
- ``UNREADABLE``: the checkpoint or the tensor could not be read;
- ``NO_RATIO``: compared, but the ratio has no value (the previous tensor's norm is 0 and it changed, or no
  position is finite on both sides);
- ``PENDING``: not read yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptview.core.series.model import SeriesResult

if TYPE_CHECKING:
    import numpy as np

VALUE, ABSENT, FIRST, UNCHANGED, NAN, INF, UNREADABLE, NO_RATIO, PENDING = range(9)
KIND_NAMES = ("value", "absent", "first", "unchanged", "nan", "inf", "unreadable", "no_ratio", "pending")


@dataclass
class Cells:
    """The heat-map's content: ``levels`` (log10 update ratio, NaN where not a value), ``kinds`` (one of the
    constants above), and the NaN/Inf cell counts for the caption."""

    levels: np.ndarray
    kinds: np.ndarray
    nan_cells: int
    inf_cells: int


def cell_kinds(result: SeriesResult, done: int, floor: float) -> Cells:
    """Classify every cell of the checkpoints read so far (``done``); later columns are PENDING."""
    import numpy as np

    rows = list(result.tensors.values())
    count = len(result.checkpoints)
    done = min(done, count)
    all_kinds: list[int] = []
    all_levels: list[float] = []
    bad = [ref.error is not None for ref in result.checkpoints[:done]]
    log10 = math.log10
    # One pass of plain Python per cell (a run of 100,000 tensors is a million cells): locals, no calls.
    for s in rows:
        row_kinds = [PENDING] * count
        row_levels = [math.nan] * count
        shapes, stats, errors = s.shapes, s.stats, s.errors
        ratios, compared, changed = s.update_ratio, s.compared, s.changed
        for t in range(done):
            if bad[t] or errors[t] is not None:
                row_kinds[t] = UNREADABLE
            elif shapes[t] is None:
                row_kinds[t] = ABSENT
            elif (st := stats[t]) is not None and st.nan:
                row_kinds[t] = NAN
            elif st is not None and (st.posinf or st.neginf):
                row_kinds[t] = INF
            elif compared[t] is None:  # no comparison was made
                row_kinds[t] = FIRST
            elif (ratio := ratios[t]) is None:
                row_kinds[t] = NO_RATIO
            else:
                row_levels[t] = max(log10(ratio), floor) if ratio > 0 else floor
                row_kinds[t] = UNCHANGED if ratio == 0 and not changed[t] else VALUE
        all_kinds += row_kinds
        all_levels += row_levels
    kinds = np.array(all_kinds, dtype=np.int8).reshape(len(rows), count)
    levels = np.array(all_levels, dtype=np.float64).reshape(len(rows), count)
    return Cells(levels, kinds, int((kinds == NAN).sum()), int((kinds == INF).sum()))
