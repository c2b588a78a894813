"""The header row of a view whose whole content is one long job (a comparison, a training run)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton


def job_header(summary: QLabel, on_cancel: Callable[[], None]) -> tuple[QHBoxLayout, QProgressBar, QPushButton]:
    """`summary` stretched, then a progress bar (0..1000) and a Cancel button wired to `on_cancel`."""
    progress = QProgressBar()
    progress.setRange(0, 1000)
    progress.setMaximumWidth(220)
    cancel = QPushButton("Cancel")
    cancel.clicked.connect(on_cancel)
    row = QHBoxLayout()
    row.addWidget(summary, 1)
    row.addWidget(progress)
    row.addWidget(cancel)
    return row, progress, cancel
