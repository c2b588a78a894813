"""The "Heat-map" side panel: a tensor viewed as 2-D, block max-abs downsampled, symmetric colour range."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from ckptview.core.heatmap import HeatMap, iter_heatmap
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.model import Node, TensorInfo
from ckptview.gui.panels import CheckpointContext, register_panel
from ckptview.gui.workers import JobSlot


def _heatmap_job(info: TensorInfo, axis: int, token: CancelToken) -> Generator[Progress, None, HeatMap]:
    from ckptview.core.values import read_values  # mapping the file happens in the worker too

    return (yield from iter_heatmap(read_values(info), axis, token=token))


def display_image(image: np.ndarray) -> tuple[np.ndarray, float]:
    """(image ready for ImageItem, m) with levels (-m, m): NaN shown as 0, ±Inf saturated."""
    finite = np.isfinite(image)
    m = float(np.abs(image[finite]).max()) if finite.any() else 0.0
    m = m or 1.0
    shown = np.where(np.isnan(image), 0.0, np.clip(image, -m, m))
    return shown, m


class HeatmapView(QWidget):
    """ImageItem with a diverging colour bar centred on zero; the axis picks which dimension is rows."""

    ready = Signal()

    def __init__(self, context: CheckpointContext | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.info: TensorInfo | None = None
        self.heatmap: HeatMap | None = None
        self.slot = JobSlot(self)
        self.slot.returned.connect(self._on_result)
        self.slot.yielded.connect(
            lambda p: self.status.setText(f"reading… {p.fraction:.0%}") if isinstance(p, Progress) else None)
        self.slot.errored.connect(lambda exc: self.status.setText(f"error: {exc}"))
        self.axis = QSpinBox(minimum=0, maximum=0)
        self.axis.setPrefix("rows = dim ")
        self.status = QLabel("Select a tensor to see it as a heat-map.")
        self.status.setWordWrap(True)
        controls = QHBoxLayout()
        controls.addWidget(self.axis)
        controls.addStretch(1)
        self.graphics = pg.GraphicsLayoutWidget()
        self.plot = self.graphics.addPlot()
        self.plot.invertY(True)
        self.plot.setAspectLocked(False)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.bar = pg.ColorBarItem(values=(-1, 1), colorMap=pg.colormap.get("CET-D1"), interactive=False)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.status)
        self.axis.valueChanged.connect(lambda _: self._restart())

    def set_selection(self, entries: list[Node]) -> None:
        """Show the first selected tensor."""
        tensors = [n.tensor for n in entries if n.kind == "tensor" and n.tensor is not None]
        self.set_tensor(tensors[0] if tensors else None)

    def set_tensor(self, info: TensorInfo | None) -> None:
        """Show ``info`` (None clears the view)."""
        self.info = info
        self.axis.blockSignals(True)
        self.axis.setMaximum(max(0, len(info.shape) - 1) if info is not None else 0)
        self.axis.setValue(0)
        self.axis.setEnabled(info is not None and len(info.shape) > 1)
        self.axis.blockSignals(False)
        self._restart()

    def _restart(self) -> None:
        self.heatmap = None
        self.image.clear()
        if self.info is None:
            self.slot.cancel()
            self.status.setText("Select a tensor to see it as a heat-map.")
            return
        self.status.setText("reading…")
        self.slot.start(_heatmap_job, self.info, self.axis.value())

    def _on_result(self, hm: object) -> None:
        assert isinstance(hm, HeatMap)
        self.heatmap = hm
        rows, cols = hm.matrix_shape
        if hm.image.size == 0:
            self.status.setText(f"{rows} x {cols}: nothing to draw")
            self.ready.emit()
            return
        shown, m = display_image(hm.image)
        self.image.setImage(shown, levels=(-m, m))
        self.bar.setLevels((-m, m))
        # Place pixels in element coordinates so the axes read as matrix row/column indices.
        br, bc = hm.block
        self.image.setRect(0, 0, shown.shape[1] * bc, shown.shape[0] * br)
        how = f"; each pixel is the max |x| (sign kept) of a {br} x {bc} block" if hm.downsampled else ""
        self.status.setText(f"{rows:,} x {cols:,} (rows = dim {hm.axis}){how}; colour range ±{m:.4g}")
        self.ready.emit()


register_panel("Heat-map", HeatmapView, order=20)
