"""Tools > Compute On…: where the window's whole-checkpoint work runs (a comparison's values, an export's
tensors): this machine (its cores when a checkpoint is large enough to pay for them), or a Dask cluster
whose workers open the files themselves (docs/guide/distributed.md). Kept in the window's settings."""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QLineEdit,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

# An address as Dask takes it: a protocol, a host and a port (tcp://10.0.0.5:8786, tls://scheduler:8786).
_ADDRESS = re.compile(r"^[a-z][a-z0-9+.-]*://[^\s/]+:\d{1,5}$")


class ComputeOnDialog(QDialog):
    """Choose this machine or a Dask scheduler's address; `address()` is the choice (None: this machine)."""

    def __init__(self, address: str | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compute on")
        self.setObjectName("computeOnDialog")
        layout = QVBoxLayout(self)
        intro = QLabel("Where a comparison reads its values and an export its tensors:")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        self.here = QRadioButton("This machine (its cores, when a checkpoint is large enough)")
        self.cluster = QRadioButton("A Dask cluster, its workers opening the files themselves:")
        self.address_edit = QLineEdit(address or "")
        self.address_edit.setPlaceholderText("tcp://HOST:PORT")
        self.address_edit.setAccessibleName("Dask scheduler address")
        note = QLabel("Local paths and export folders must lie on a file system every worker shares; the "
                      "workers use their own credentials for S3 and the Hub.")
        note.setWordWrap(True)
        note.setObjectName("computeOnNote")
        for widget in (self.here, self.cluster, self.address_edit, note):
            layout.addWidget(widget)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        (self.cluster if address else self.here).setChecked(True)
        for signal in (self.here.toggled, self.address_edit.textChanged):
            signal.connect(self._update)
        self._update()

    def address(self) -> str | None:
        """The scheduler chosen, or None for this machine."""
        return self.address_edit.text().strip() if self.cluster.isChecked() else None

    def _update(self) -> None:
        chosen = self.cluster.isChecked()
        self.address_edit.setEnabled(chosen)
        text = self.address_edit.text().strip()
        ok = not chosen or _ADDRESS.match(text) is not None
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)


def choose_compute(window: Any) -> ComputeOnDialog:
    """Tools > Compute On…: ask, keep the answer in the window's settings, say it in the status bar."""
    dialog = ComputeOnDialog(window.settings.scheduler(), window)

    def chosen() -> None:
        address = dialog.address()
        window.settings.set_scheduler(address)
        window.settings.sync()
        where = f"the Dask cluster at {address}" if address else "this machine"
        window.statusBar().showMessage(f"Comparisons and exports opened from now on run on {where}.", 8000)

    dialog.accepted.connect(chosen)
    dialog.open()
    return dialog
