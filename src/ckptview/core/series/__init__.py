"""A training run's checkpoints as a timeline: discovery, figures per step (serial, pool or Dask),
findings, the SQLite cache, live following."""

from __future__ import annotations

from ckptview.core.series.cache import SeriesCache
from ckptview.core.series.live import LiveRun
from ckptview.core.series.model import SeriesResult, TensorSeries
from ckptview.core.series.timeline import iter_series, plan_series, run_series
from ckptview.core.series.watch import watch_run

__all__ = ["LiveRun", "SeriesCache", "SeriesResult", "TensorSeries", "iter_series", "plan_series", "run_series", "watch_run"]
