"""The series tab: a training run's timeline, its plots, spectra and Follow."""

from __future__ import annotations

from ckptview.gui.series.tab import SeriesTab, open_series_tab

__all__ = ["SeriesTab", "open_series_tab"]
