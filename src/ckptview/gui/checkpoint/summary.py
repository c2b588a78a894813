"""The summary header of a checkpoint tab: key facts and a size-by-module bar chart."""

from __future__ import annotations

import os

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.inspect.grouping import Row, chart_rows
from ckptview.core.inspect.summary import SizeFacts, size_facts
from ckptview.core.text import printable
from ckptview.core.units import MISSING, count_text, human_bytes, plural
from ckptview.gui.base.palette import mute
from ckptview.gui.base.size_chart import SizeChart

FACT_MIN_WIDTH = 140
FACT_MAX_WIDTH = 300  # and at most this many: the rest of a long name is in the tooltip  # pixels a fact keeps before it is cut (its tooltip holds it whole)


class SummaryHeader(QWidget):
    """Format, file size, counts, bytes by dtype, and where the bytes are."""

    collapsedChanged = Signal(bool)

    def __init__(self, checkpoint: Checkpoint, top: Row, facts: SizeFacts | None = None,
                 parent: QWidget | None = None, collapsed: bool = False) -> None:
        super().__init__(parent)
        self.setObjectName("summaryHeader")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(0)
        # The toggle lives where the tab puts it (the filter row): collapsed, it reads the file's headline.
        self.toggle = QToolButton()
        self.toggle.setObjectName("summaryToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setToolTip("Show or hide the summary (remembered)")
        self.body = QWidget()
        outer.addWidget(self.body)
        layout = QHBoxLayout(self.body)
        layout.setContentsMargins(8, 0, 8, 4)
        # Two columns of three facts: the summary stays three lines tall, so a 640 px screen keeps room
        # for the tree and the panels (histograms) below it.
        forms = [_fact_form(), _fact_form()]
        facts = facts or size_facts(checkpoint)  # normally computed by the opening worker
        dtypes = ", ".join(f"{d} {human_bytes(n)}" for d, n in facts.bytes_by_dtype) or MISSING
        params = facts.parameters
        self.facts = {
            "File": printable(os.path.basename(checkpoint.path) or checkpoint.path),
            "Format": checkpoint.format,
            "File size": f"{human_bytes(checkpoint.file_size)} ({checkpoint.file_size:,} bytes)",
            "Tensors": f"{top.tensors:,}",
            "Parameters": f"{params:,} ({count_text(params)})" if params >= 10_000_000 else f"{params:,}",
            "Bytes by dtype": dtypes,
        }
        if facts.buffers:  # running statistics and counters, apart as torch counts them
            self.facts["Buffers"] = f"{facts.buffers:,}"
        while len(forms) * 3 < len(self.facts):  # three facts a column: the summary stays three lines tall
            forms.append(_fact_form())
        for i, (key, value) in enumerate(self.facts.items()):
            form = forms[i // 3]
            label = QLabel(value)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            label.setObjectName(f"fact_{key.replace(' ', '_').lower()}")
            # A long name or many dtypes must not make the window wider than the screen: the label may be
            # cut, its whole text is in the tooltip.
            # (Preferred, not Ignored: a form whose fields ignore their size hints reports a hint below its
            # minimum, and the box layout then squeezed the captions to nothing and the columns over each other.)
            label.setMinimumWidth(min(label.sizeHint().width(), FACT_MIN_WIDTH))
            label.setMaximumWidth(FACT_MAX_WIDTH)
            label.setToolTip(value)
            if key == "File":
                label.setToolTip(printable(checkpoint.path))
            if key == "Parameters":
                label.setToolTip("elements of the learnable parameters, as torch's model.parameters() counts "
                                 "them (tied weights once; buffers and optimizer state apart)")
            if key == "Buffers":
                label.setToolTip("elements of buffers and counters: integer tensors and the buffer names torch "
                                 "registers (running_mean, running_var, num_batches_tracked, inv_freq, ...)")
            caption = QLabel(key + ":")
            mute(caption)
            form.addRow(caption, label)
        for i, form in enumerate(forms):
            if i:
                layout.addSpacing(12)
            layout.addLayout(form, 0)
        self.bars = chart_rows(top, limit=8)
        self.chart = SizeChart(self.bars)
        layout.addWidget(self.chart, 1)
        self.headline = (f"{checkpoint.format}, {human_bytes(checkpoint.file_size)}, {plural(top.tensors, 'tensor')}, "
                         f"{plural(params, 'parameter')}")
        self.toggle.toggled.connect(self._on_toggled)
        self.toggle.setChecked(not collapsed)
        self._on_toggled(not collapsed)

    @property
    def collapsed(self) -> bool:
        """True while only the one-line headline shows."""
        return not self.toggle.isChecked()

    def set_collapsed(self, collapsed: bool) -> None:
        """Show only the headline (True) or every fact and the chart (False)."""
        self.toggle.setChecked(not collapsed)

    def _on_toggled(self, expanded: bool) -> None:
        self.body.setVisible(expanded)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.toggle.setText("Summary" if expanded else f"Summary: {self.headline}")
        self.collapsedChanged.emit(not expanded)


def _fact_form() -> QFormLayout:
    form = QFormLayout()
    form.setHorizontalSpacing(8)
    form.setVerticalSpacing(1)
    form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
    return form
