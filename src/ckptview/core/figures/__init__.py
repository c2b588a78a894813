"""Per-tensor figures: statistics, histograms, heat-maps, spectra, and the analysis object that computes
each once for every panel and command that asks."""

from __future__ import annotations

from ckptview.core.figures.analysis import Analysis
from ckptview.core.figures.heatmap import HeatMap
from ckptview.core.figures.histogram import Histogram
from ckptview.core.figures.spectral import Spectrum
from ckptview.core.figures.stats import TensorStats, tensor_stats

__all__ = ["Analysis", "HeatMap", "Histogram", "Spectrum", "TensorStats", "tensor_stats"]
