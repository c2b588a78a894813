"""Per-tensor figures: statistics, histograms, heat-maps, spectra, and the analysis object that computes
each once for every panel and command that asks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.figures.analysis import Analysis
    from ckptview.core.figures.heatmap import HeatMap
    from ckptview.core.figures.histogram import Histogram
    from ckptview.core.figures.spectral import Spectrum, matrix_of, spectrum
    from ckptview.core.figures.stats import TensorStats, tensor_stats

__all__ = ["Analysis", "HeatMap", "Histogram", "Spectrum", "TensorStats", "matrix_of", "spectrum", "tensor_stats"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "analysis": ["Analysis"],
    "heatmap": ["HeatMap"],
    "histogram": ["Histogram"],
    "spectral": ["Spectrum", "matrix_of", "spectrum"],
    "stats": ["TensorStats", "tensor_stats"],
})
