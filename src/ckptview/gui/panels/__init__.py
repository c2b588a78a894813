"""Side panels of a checkpoint tab: statistics, heat-map, values, spectrum, optimizer, training, run."""

from __future__ import annotations

from ckptview.gui.panels.heatmap import HeatmapPanel
from ckptview.gui.panels.optimizer import OptimizerPanel
from ckptview.gui.panels.run import RunPanel
from ckptview.gui.panels.spectrum import SpectrumPanel
from ckptview.gui.panels.statistics import StatsPanel
from ckptview.gui.panels.training import TrainingPanel
from ckptview.gui.panels.values import ValuesPanel

__all__ = ["HeatmapPanel", "OptimizerPanel", "RunPanel", "SpectrumPanel", "StatsPanel", "TrainingPanel", "ValuesPanel"]
