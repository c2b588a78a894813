"""File > Export…: write the selected tensors (or the whole checkpoint) to .npy files, .npz or .safetensors.

A thin dialog over `ckptview.core.export.plan`: the plan (targets, dtype notes) is computed from metadata on
the GUI thread; the bytes are written by the core generator in a worker, with progress and cancel.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QStandardPaths, Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from ckptview.core import sweep
from ckptview.core.checkpoint import Checkpoint, Node, TensorEntry
from ckptview.core.errors import CheckpointError
from ckptview.core.export.plan import MANIFEST, entries_below, exported_entries, plan_export
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.message import message_of
from ckptview.core.read.bytes.location import locate
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.values.repeats import repeats
from ckptview.core.sweep.runner import LOCAL, Placement
from ckptview.core.text import printable, shown
from ckptview.core.units import human_bytes, plural
from ckptview.gui.base.palette import color
from ckptview.gui.base.wording import window_text
from ckptview.gui.base.workers import GeneratorWorker, JobSlot
from ckptview.gui.base.wrap import message_width, wrap_long_words
from ckptview.resources import resource_path

if TYPE_CHECKING:  # imported where first needed, not at start-up (numpy)
    from ckptview.core.export.plan import ExportPlan, ExportResult


def export_job(checkpoint: Checkpoint, plan: ExportPlan, placement: Placement, remote: RemoteOptions, *,
               force: bool = False, token: CancelToken | None = None, **options: Any,
               ) -> Generator[Progress, None, ExportResult]:
    """`plan` written where `placement` says (Tools > Compute On…): in this process, on this machine's cores
    for a large checkpoint, or by the workers of a Dask cluster, each opening the file itself (the core's
    modules import numpy: imported when an export starts, not at launch)."""
    return sweep.export_placed(checkpoint, checkpoint.path, remote, plan, placement, force=force, token=token,
                               **options)


# (format, label, what the default output name ends with)
FORMATS = [
    ("npy", "Folder of .npy files (one per tensor)", "-export"),
    ("npz", "One .npz archive (keys = tensor names)", "-export.npz"),
    ("safetensors", "One .safetensors file (original names)", "-export.safetensors"),
]
# The installed package (gui/export/dialog.py is three folders below it) and its shipped resources (beside
# it in a checkout): the bundled example's folder is no place to write an export to.
INSTALLED_FOLDERS = (os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     os.path.dirname(resource_path("example.pth")))


def default_folder(checkpoint_path: str) -> str:
    """Where an export goes unless the user says: beside the checkpoint, unless that is a URL, a folder
    that cannot be written, or inside the installed package (the bundled example): then the user's
    documents folder (or home)."""
    if not locate(checkpoint_path).is_remote:
        folder = os.path.dirname(os.path.abspath(checkpoint_path))
        inside = any(folder == p or folder.startswith(p + os.sep) for p in INSTALLED_FOLDERS)
        if not inside and os.access(folder, os.W_OK):
            return folder
    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return documents if documents and os.path.isdir(documents) and os.access(documents, os.W_OK) \
        else os.path.expanduser("~")


# Ctrl+E is Expand All in the main window; an ambiguous shortcut would fire neither action.
SHORTCUT = "Ctrl+Shift+S"


class ExportDialog(QDialog):
    """Choose format, target and dtype handling; run the export with progress, cancel and "Open folder"."""

    def __init__(self, checkpoint: Checkpoint, selection: list[Node] | None = None,
                 parent: QWidget | None = None, placement: Placement = LOCAL,
                 remote: RemoteOptions | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export tensors")
        self.setObjectName("exportDialog")
        self.checkpoint = checkpoint
        # Where the tensors are read and written (the window's Tools > Compute On…), how its URLs are read.
        self.placement, self.remote = placement, remote if remote is not None else RemoteOptions()
        self.selected = entries_below(checkpoint, selection or [])
        self.everything = exported_entries(checkpoint)  # a quantized weight: its stored parts, bit for bit
        self.slot = JobSlot(self)
        self.slot.yielded.connect(self._on_progress)
        self.slot.returned.connect(self._on_done)
        self.slot.errored.connect(lambda exc: self._show_error(message_of(exc)))
        self.slot.aborted.connect(lambda: self.status.setText("Cancelled: nothing was written."))
        self.slot.busy.connect(self._on_busy)
        self.worker: GeneratorWorker | None = None  # the running export's job (None when none runs)
        # The export's outcome (tests and callers read it); it shadows QDialog.result(), which nobody calls.
        self.result: ExportResult | None = None  # type: ignore[assignment]
        self._build()
        self._update_plan()

    # --- layout ----------------------------------------------------------------------------------
    def _build(self) -> None:
        self.use_selection = QRadioButton(self._scope_text("Selection", self.selected))
        self.use_all = QRadioButton(self._scope_text("Whole checkpoint", self.everything))
        (self.use_selection if self.selected else self.use_all).setChecked(True)
        self.use_selection.setEnabled(bool(self.selected))
        self.format_box = QComboBox()
        for fmt, label, _ in FORMATS:
            self.format_box.addItem(label, fmt)
        self.path_edit = QLineEdit(self._default_path("npy"))
        self.browse_button = QPushButton("Browse…")
        self.exact_box = QCheckBox("Keep exact bfloat16/float8 bits (loading needs `import ml_dtypes`)")
        # Tensors that repeat their storage (stride 0, overlapping strides) are written only when asked:
        # the box says their expanded size first (`values.repeats`).
        self.expand_box = QCheckBox()
        self.expand_box.setObjectName("expandRepeats")
        self.notes = QPlainTextEdit()
        self.notes.setReadOnly(True)
        self.notes.setMaximumHeight(90)
        self.preview = QPlainTextEdit()  # every file (or key) the export will write, before it writes
        self.preview.setObjectName("exportPreview")
        self.preview.setReadOnly(True)
        self.preview.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.existing_label = QLabel()
        self.existing_label.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.hide()  # shown while an export runs: an idle empty bar reads as a text field
        self._written: set[str] = set()  # what the last export wrote (until the plan changes)
        self._written_text = ""
        self._written_plan: tuple[str, str, bool, bool, bool] | None = None  # the choices that export was made with
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.export_button = QPushButton("Export")
        self.export_button.setDefault(True)
        self.cancel_button = QPushButton("Cancel")
        self.open_button = QPushButton("Open folder")
        self.open_button.setVisible(False)
        self.close_button = QPushButton("Close")

        target = QHBoxLayout()
        target.addWidget(self.path_edit, 1)
        target.addWidget(self.browse_button)
        form = QFormLayout()
        form.addRow("Tensors", self.use_selection)
        form.addRow("", self.use_all)
        form.addRow("Format", self.format_box)
        form.addRow("Save to", target)
        form.addRow("", self.exact_box)
        form.addRow("", self.expand_box)
        form.addRow("Will write", self.preview)
        form.addRow("", self.existing_label)
        form.addRow("Notes", self.notes)
        buttons = QHBoxLayout()
        buttons.addWidget(self.open_button)
        buttons.addStretch(1)
        for button in (self.export_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        self.cancel_button.setEnabled(False)

        self.format_box.currentIndexChanged.connect(self._format_changed)
        for changed in (self.use_selection.toggled, self.exact_box.toggled, self.expand_box.toggled,
                        self.path_edit.textChanged):
            changed.connect(self._update_plan)
        self.browse_button.clicked.connect(self.browse)
        self.export_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.open_button.clicked.connect(self.open_folder)
        self.close_button.clicked.connect(self.reject)
        self.resize(620, 0)

    @staticmethod
    def _scope_text(label: str, entries: list[TensorEntry]) -> str:
        return f"{label}: {plural(len(entries), 'tensor')}, {human_bytes(sum(e.info.nbytes for e in entries))}"

    def _default_path(self, fmt: str) -> str:
        path = self.checkpoint.path
        base = os.path.basename(path.split("?", 1)[0].rstrip("/" + os.sep))
        stem = base.split(".", 1)[0] or "checkpoint"
        return os.path.join(default_folder(path), stem + dict((f, s) for f, _, s in FORMATS)[fmt])

    # --- choices ---------------------------------------------------------------------------------
    def format(self) -> str:
        """The chosen format name (npy, npz, safetensors)."""
        return str(self.format_box.currentData())

    def entries(self) -> list[TensorEntry]:
        """The tensors the export will write."""
        return self.selected if self.use_selection.isChecked() else list(self.everything)

    def exact_choice_applies(self) -> bool:
        """True when the bf16/fp8 choice changes anything: such tensors chosen, and not safetensors."""
        narrow = any(e.info.dtype == "bfloat16" or e.info.dtype.startswith("float8") for e in self.entries())
        return narrow and self.format() != "safetensors"  # safetensors keeps bf16/fp8 exactly anyway

    def _format_changed(self) -> None:
        fmt = self.format()
        old = self.path_edit.text()
        # Follow the format with the file name unless the user typed something of their own.
        if old in {self._default_path(f) for f, _, _ in FORMATS}:
            self.path_edit.setText(self._default_path(fmt))
        self._update_plan()

    def repeating(self) -> tuple[int, int, int]:
        """(tensors that repeat their storage, the elements they declare, the bytes they would write)."""
        count = elements = nbytes = 0
        for entry in self.entries():
            found = repeats(entry.info)
            if found is not None:
                count, elements, nbytes = count + 1, elements + found.elements, nbytes + entry.info.nbytes
        return count, elements, nbytes

    def plan(self) -> ExportPlan:
        """The export as currently chosen (metadata only); ExportError when it cannot be done."""
        return plan_export(self.entries(), self.path_edit.text().strip(), self.format(),
                           exact_dtypes=self.exact_box.isChecked() and self.exact_choice_applies(),
                           expand_repeats=self.expand_box.isChecked())

    def _update_plan(self) -> None:
        if self.worker is not None:
            return
        choice = (self.path_edit.text(), self.format(), self.use_selection.isChecked(), self.exact_box.isChecked(),
                  self.expand_box.isChecked())
        if self._written and choice == self._written_plan:
            return  # the preview still says what was written
        self._written = set()
        self.exact_box.setVisible(self.exact_choice_applies())  # only options that apply are offered
        count, elements, nbytes = self.repeating()
        self.expand_box.setVisible(count > 0)
        if count:
            self.expand_box.setText(f"Write {count} tensor(s) that repeat their storage expanded: "
                                    f"{plural(elements, 'element')}, {human_bytes(nbytes)}")
        try:
            plan = self.plan()
        except CheckpointError as exc:
            self.notes.setPlainText(window_text(exc))
            self.preview.setPlainText("")
            self.existing_label.setText("")
            self.export_button.setEnabled(False)
            return
        self.export_button.setEnabled(True)
        self.notes.setPlainText("\n".join(window_text(n) for n in plan.notes)
                                or "All values are written exactly as stored.")
        existing = set(plan.existing())
        self.preview.setPlainText(preview_text(plan, existing))
        if existing:
            self.existing_label.setStyleSheet(f"color: {color('warning').name()}")
            self.existing_label.setText(f"{len(existing)} of these exist already: Export asks before replacing them.")
        else:
            self.existing_label.setStyleSheet("")
            self.existing_label.setText(f"{len(plan.final_paths())} new file(s), "
                                        f"{human_bytes(plan.total_bytes)} of values.")

    def browse(self) -> None:
        """Pick the folder (npy) or file (npz, safetensors) with the platform dialog."""
        current = self.path_edit.text()
        if self.format() == "npy":
            path = QFileDialog.getExistingDirectory(self, "Export into folder", current)
        else:
            suffix = "." + self.format()
            path, _ = QFileDialog.getSaveFileName(self, "Export to file", current, f"*{suffix}")
            if path and not path.endswith(suffix):
                path += suffix
        if path:
            self.path_edit.setText(path)

    # --- running ---------------------------------------------------------------------------------
    def confirm_overwrite(self, paths: list[str]) -> bool:
        """Ask before replacing existing files (QFileDialog has asked already for a chosen file name)."""
        listed = "\n".join(printable(p) for p in paths[:8]) + (f"\n… and {len(paths) - 8} more" if len(paths) > 8 else "")
        listed = wrap_long_words(listed, self.fontMetrics(), message_width(self))  # the box fits the screen
        answer = QMessageBox.question(self, "Replace files?", f"{len(paths)} file(s) exist already:\n{listed}\n\n"
                                      "Replace them?", QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def start(self) -> None:
        """Plan, confirm overwrites, then write in a worker."""
        try:
            plan = self.plan()
        except CheckpointError as exc:
            self._show_error(message_of(exc))
            return
        existing = plan.existing()
        if existing and not self.confirm_overwrite(existing):
            self.status.setText("Nothing written.")
            return
        self.result = None
        self.open_button.setVisible(False)
        self.progress.setValue(0)
        self.status.setStyleSheet("")
        self.status.setText(f"Writing {plural(len(plan.items), 'tensor')} to {printable(plan.out)} …")
        self._set_running(True)
        self.progress.show()
        self.worker = self.slot.start(export_job, self.checkpoint, plan, self.placement, self.remote,
                                      force=bool(existing))

    def cancel(self) -> None:
        """Stop a running export; the core removes its temporary files."""
        if self.worker is not None:
            self.status.setText("Cancelling…")
            self.slot.stop()

    def _set_running(self, running: bool) -> None:
        for widget in (self.export_button, self.format_box, self.path_edit, self.browse_button,
                       self.exact_box, self.expand_box, self.use_selection, self.use_all):
            widget.setEnabled(not running)
        if not running:
            self.use_selection.setEnabled(bool(self.selected))
        self.cancel_button.setEnabled(running)

    def _on_progress(self, progress: Progress) -> None:
        self.progress.setValue(int(progress.fraction * 1000))
        self.status.setText(shown(progress.message))

    def _on_done(self, result: ExportResult) -> None:
        self.result = result
        self.progress.setValue(1000)
        text = (f"Wrote {plural(len(result.files), 'tensor')} ({human_bytes(result.bytes_written)}) to "
                f"{printable(result.out)}")
        self.status.setText(text)
        self.open_button.setVisible(True)
        try:
            self._written = set(self.plan().final_paths())
        except CheckpointError:
            self._written = set()
        self._written_text = text

    def _on_busy(self, busy: bool) -> None:
        if not busy:  # the export ended: written, failed or cancelled
            self._on_finished()

    def _on_finished(self) -> None:
        self.worker = None
        self.progress.hide()
        self._set_running(False)
        written, self._written = self._written, set()
        self._update_plan()
        if written:  # what was just written is no file "that exists and will be replaced"
            plan = self.plan()
            self.preview.setPlainText(preview_text(plan, set(), written))
            self.existing_label.setStyleSheet("")
            self.existing_label.setText(self._written_text + ".")
            self._written = written
            self._written_plan = (self.path_edit.text(), self.format(), self.use_selection.isChecked(),
                                  self.exact_box.isChecked(), self.expand_box.isChecked())

    def _show_error(self, message: str) -> None:
        self.status.setStyleSheet(f"color: {color('error').name()}")
        self.status.setText(shown(window_text(message)))

    def result_folder(self) -> str | None:
        """The folder holding what was written (the .npy folder, or the file's folder)."""
        if self.result is None:
            return None
        out = self.result.out
        return out if os.path.isdir(out) else os.path.dirname(out)

    def open_folder(self) -> None:
        """Show the result in the file manager."""
        folder = self.result_folder()
        if folder:
            QDesktopServices.openUrl(QUrl.fromLocalFile(folder))

    def reject(self) -> None:
        """Close (Escape, Close button): a running export is cancelled first."""
        self.slot.stop()
        super().reject()

    def closeEvent(self, event: Any) -> None:
        self.slot.stop()
        super().closeEvent(event)


MAX_PREVIEW_LINES = 500


def preview_text(plan: ExportPlan, existing: set[str], written: set[str] | None = None) -> str:
    """One line per file (npy folder) or per key (npz, safetensors), existing targets marked (and, after an
    export, the files it `written`)."""
    def mark(path: str) -> str:
        if written and path in written:
            return "   [written]"
        return "   [exists: will be replaced]" if path in existing else ""

    lines: list[str] = []
    if plan.format == "npy" and not plan.single_file:
        for item in plan.items[:MAX_PREVIEW_LINES]:
            path = os.path.join(plan.out, item.target)
            lines.append(f"{shown(item.target)}  <-  {shown(item.name)} ({item.dtype}){mark(path)}")
        lines.append(f"{MANIFEST}{mark(os.path.join(plan.out, MANIFEST))}")
    else:
        lines.append(f"{printable(plan.out)}{mark(plan.out)}")
        for item in plan.items[:MAX_PREVIEW_LINES]:
            lines.append(f"  {shown(item.target)}  <-  {shown(item.name)} ({item.dtype})")
    if len(plan.items) > MAX_PREVIEW_LINES:
        lines.append(f"… and {len(plan.items) - MAX_PREVIEW_LINES:,} more")
    return "\n".join(lines)


def selection_nodes(window: Any) -> list[Node]:
    """The tree selection as core nodes, module-group rows included (through the rows below them)."""
    tab = window.current_tab()
    rows = tab.selected_rows() if tab is not None else None
    if rows is None:
        return list(window.current_selection())
    return [r.node for row in rows for r in row.walk() if r.node is not None]


def export_nodes(window: Any, nodes: list[Node] | None = None) -> ExportDialog | None:
    """Open the export dialog for the current checkpoint tab and `nodes` (default: the tree selection)."""
    context = window.current_context()
    if context is None:
        window.statusBar().showMessage("Open a checkpoint to export its tensors.", 8000)
        return None
    dialog = ExportDialog(context.checkpoint, selection_nodes(window) if nodes is None else nodes, window,
                          window.placement(), window.workspace.remote)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.open()
    return dialog
