"""The "Heat-map" side panel: a tensor viewed as 2-D, block max-abs downsampled, symmetric colour range."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.figures.analysis import Analysis
from ckptview.core.figures.heatmap import HeatMap
from ckptview.core.inspect.grouping import Selected
from ckptview.core.jobs import Progress
from ckptview.gui.base.job_bar import JobBar
from ckptview.gui.base.log_axis import index_axis
from ckptview.gui.base.plots import (
    follow_background,
    make_exportable,
    nonfinite_caption,
    nonfinite_colors,
    say_drawn,
    say_nothing,
    style_color_bar,
    style_plot,
)
from ckptview.gui.base.workers import JobSlot
from ckptview.gui.checkpoint.host import CheckpointContext

if TYPE_CHECKING:  # imported where a plot or values are first needed, not at start-up
    import numpy as np

    from ckptview.core.figures.heatmap import HeatMap


DEFAULT_PERCENTILE = 99.5


def display_image(image: np.ndarray, percentile: float = 100.0) -> tuple[np.ndarray, float]:
    """(image ready for ImageItem, m) with levels (-m, m): m is that percentile of |x| over finite pixels.

    A few large weights no longer wash the map out: values beyond ±m saturate. NaN and ±Inf are drawn
    over it in colours of their own (`nonfinite_overlay`); here NaN is 0 and an infinity saturates.
    """
    import numpy as np
    finite = np.abs(image[np.isfinite(image)])
    m = float(np.percentile(finite, percentile)) if finite.size else 0.0
    m = m or (float(finite.max()) if finite.size else 0.0) or 1.0
    shown = np.where(np.isnan(image), 0.0, np.clip(image, -m, m))
    return shown, m


def nonfinite_overlay(image: np.ndarray) -> np.ndarray | None:
    """RGBA pixels for the NaN, +Inf and -Inf pixels of `image` (transparent elsewhere); None when all finite."""
    import numpy as np
    from PySide6.QtGui import QColor

    if np.isfinite(image).all():
        return None
    out = np.zeros(image.shape + (4,), dtype=np.uint8)
    colors = nonfinite_colors()
    for name, mask in (("NaN", np.isnan(image)), ("+Inf", np.isposinf(image)), ("-Inf", np.isneginf(image))):
        color = QColor(colors[name])
        out[mask] = (color.red(), color.green(), color.blue(), 255)
    return out


class HeatmapPanel(QWidget):
    """ImageItem with a diverging colour bar centred on zero; the axis picks which dimension is rows."""

    ready = Signal()
    status: QLabel  # made below the job slot whose handlers write to it

    def __init__(self, context: CheckpointContext | None = None, parent: QWidget | None = None) -> None:
        import pyqtgraph as pg

        super().__init__(parent)
        # The picture comes from the checkpoint's Analysis: read once per tensor and axis, the last few kept.
        self.analysis = context.analysis if context is not None else Analysis()
        self.info: TensorInfo | None = None
        self.heatmap: HeatMap | None = None
        self.levels: tuple[float, float] = (-1.0, 1.0)
        self.slot = JobSlot(self)
        self.slot.returned.connect(self._on_result)
        self.slot.yielded.connect(
            lambda p: self.status.setText(f"reading… {p.fraction:.0%}") if isinstance(p, Progress) else None)
        self.slot.errored.connect(lambda exc: self.status.setText(f"error: {exc}"))
        self.slot.aborted.connect(self._on_aborted)
        self.job_bar = JobBar(self.slot)  # progress and Cancel while the tensor is read
        self.job_bar.retry.connect(self._restart)
        self.axis = QSpinBox(minimum=0, maximum=0)
        self.axis.setPrefix("rows = dim ")
        self.percentile = QDoubleSpinBox(minimum=50.0, maximum=100.0, value=DEFAULT_PERCENTILE, decimals=1,
                                         singleStep=0.5)
        self.percentile.setPrefix("colour range: ")
        self.percentile.setSuffix("th pct of |x|")
        self.percentile.setToolTip("values beyond this percentile of |x| saturate; 100 = the max")
        self.status = QLabel("Select a tensor to see it as a heat-map.")
        self.status.setWordWrap(True)
        self.hover = QLabel(" ")
        controls = QHBoxLayout()
        controls.addWidget(self.axis)
        controls.addWidget(self.percentile)
        controls.addStretch(1)
        controls.addWidget(self.job_bar)
        self.graphics = pg.GraphicsLayoutWidget()
        follow_background(self.graphics)
        make_exportable(self.graphics, "heatmap")
        self.plot = self.graphics.addPlot(axisItems={"left": index_axis("left"), "bottom": index_axis("bottom")})
        style_plot(self.plot, "column (other dims flattened)", "row", widget=self)
        self.plot.invertY(True)
        self.plot.setAspectLocked(False)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.marks = pg.ImageItem(axisOrder="row-major")  # NaN / +Inf / -Inf pixels, over the colour map
        self.marks.setZValue(self.image.zValue() + 1)
        self.plot.addItem(self.marks)
        self.bar = pg.ColorBarItem(values=(-1, 1), colorMap=pg.colormap.get("CET-D1"), interactive=False)
        style_color_bar(self.bar, self)
        self.bar.setImageItem(self.image, insert_in=self.plot)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(controls)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.hover)
        self.axis.valueChanged.connect(lambda _: self._restart())
        self.percentile.valueChanged.connect(lambda _: self._show())
        self.graphics.scene().sigMouseMoved.connect(self._on_mouse)
        say_nothing(self.plot, "Select a tensor.")

    def set_selection(self, entries: Sequence[Selected]) -> None:
        """Show the first selected tensor."""
        tensors = [n.tensor for n in entries if n.kind == "tensor" and n.tensor is not None]
        self.set_tensor(tensors[0] if tensors else None)
        if not tensors and any(n.kind == "module" or n.children for n in entries):
            self.status.setText("A module holds several tensors: the heat-map shows one at a time; select a "
                                "tensor below it (Statistics shows the whole module).")

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
        self.marks.clear()
        if self.info is None:
            self.slot.cancel()
            self.status.setText("Select a tensor to see it as a heat-map.")
            say_nothing(self.plot, "Select a tensor.")
            return
        self.status.setText("reading…")
        say_nothing(self.plot, "reading…")
        self.slot.start(self.analysis.matrix_preview, self.info, self.axis.value())

    def _on_aborted(self) -> None:
        self.status.setText("Cancelled: the tensor was not read (Compute reads it).")
        say_nothing(self.plot, "Cancelled.")

    def _on_result(self, hm: object) -> None:
        assert isinstance(hm, HeatMap)
        self.heatmap = hm
        self._show()
        self.ready.emit()

    def _show(self) -> None:
        import numpy as np
        hm = self.heatmap
        if hm is None:
            return
        rows, cols = hm.matrix_shape
        self.plot.setLabel("left", f"row (dim {hm.axis})")
        if hm.image.size == 0:
            self.image.clear()
            self.marks.clear()
            self.status.setText(f"{rows} x {cols}: nothing to draw")
            say_nothing(self.plot, f"{rows} x {cols}: no values to draw")
            return
        say_drawn(self.plot)
        pct = self.percentile.value()
        shown, m = display_image(hm.image, pct)
        self.levels = (-m, m)
        self.image.setImage(shown, levels=self.levels)
        self.bar.setLevels(self.levels)
        # Place pixels in element coordinates so the axes read as matrix row/column indices.
        br, bc = hm.block
        self.image.setRect(0, 0, shown.shape[1] * bc, shown.shape[0] * br)
        overlay = nonfinite_overlay(hm.image)
        if overlay is None:
            self.marks.clear()
        else:
            self.marks.setImage(overlay, autoLevels=False)
            self.marks.setRect(0, 0, shown.shape[1] * bc, shown.shape[0] * br)
        how = f"; each pixel is the max |x| (sign kept) of a {br} x {bc} block" if hm.downsampled else ""
        finite = hm.image[np.isfinite(hm.image)]
        top = float(np.abs(finite).max()) if finite.size else 0.0
        nonfinite = nonfinite_caption(hm.nan, hm.posinf, hm.neginf)
        block_words = " (a block holding one shows it)" if nonfinite and hm.downsampled else ""
        self.status.setText(f"{rows:,} x {cols:,} (rows = dim {hm.axis}){how}; colour range ±{m:.4g} "
                            f"({pct:g}th percentile of |x|), max |x| {top:.6g}"
                            + (f"; not finite: {nonfinite}{block_words}" if nonfinite else "")
                            + (f"; {hm.stored_only}" if hm.stored_only else ""))

    def value_at(self, row: float, col: float) -> str:
        """The hover text for element coordinates (row, col): position and the pixel's value ('' outside)."""
        hm = self.heatmap
        if hm is None or hm.image.size == 0:
            return ""
        rows, cols = hm.matrix_shape
        r, c = int(row), int(col)
        if not (0 <= r < rows and 0 <= c < cols):
            return ""
        br, bc = hm.block
        value = float(hm.image[r // br, c // bc])
        where = f"rows {r // br * br}-{min(rows, (r // br + 1) * br) - 1}, cols {c // bc * bc}-" \
                f"{min(cols, (c // bc + 1) * bc) - 1}: max |x| {value:.6g}" if hm.downsampled else \
                f"row {r}, col {c}: {value:.6g}"
        return where

    def _on_mouse(self, pos: object) -> None:
        if self.plot.sceneBoundingRect().contains(pos):
            point = self.plot.vb.mapSceneToView(pos)
            self.hover.setText(self.value_at(point.y(), point.x()) or " ")
