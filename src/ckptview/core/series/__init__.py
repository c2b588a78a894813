"""A training run's checkpoints as a timeline: discovery, figures per step (serial, pool or Dask),
findings, the SQLite cache, live following."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.series.cache import SeriesCache
    from ckptview.core.series.live import LiveRun
    from ckptview.core.series.model import SeriesResult, TensorSeries
    from ckptview.core.series.timeline import iter_series, plan_series, run_series
    from ckptview.core.series.watch import watch_run

__all__ = ["LiveRun", "SeriesCache", "SeriesResult", "TensorSeries", "iter_series", "plan_series", "run_series", "watch_run"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "cache": ["SeriesCache"],
    "live": ["LiveRun"],
    "model": ["SeriesResult", "TensorSeries"],
    "timeline": ["iter_series", "plan_series", "run_series"],
    "watch": ["watch_run"],
})
