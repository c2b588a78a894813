"""The "Run" side panel: pick a device, load the checkpoint there and run a test forward pass.

The job is the core's `runner.run_iter` generator on a pool thread; that generator drives a separate
worker process, so a crash, a hang or an OOM in the model never reaches the window. Cancel kills the process.
Ctrl+Return runs, Escape cancels; "Browse…" picks the model file and then one of the classes it defines
(read with `ast`, never imported here); "Copy result as JSON" copies what `ckptview run --json` prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut, QShowEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.errors import CheckpointError
from ckptview.core.jobs import Progress
from ckptview.core.message import message_of, rephrased
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.redaction import redact
from ckptview.core.run import request as runner
from ckptview.core.run.architectures import Architecture
from ckptview.core.run.devices import DeviceInfo, parse_device
from ckptview.core.run.fetch import recognize_url
from ckptview.core.run.input_specs import InputSpecError, describe_inputs, parse_input_specs
from ckptview.core.run.model_classes import ModelClass, ModelCodeError, classes_in_file
from ckptview.core.run.process import RunError, phase_words
from ckptview.core.run.result import RunResult, partial_words, result_json_text, result_lines
from ckptview.core.run.state_dict import find_state_dict, suggest_inputs
from ckptview.core.run.view_state import DEFAULT_DEVICES, Line, ModelLine, Phase, RunViewState
from ckptview.core.text import printable
from ckptview.core.units import MISSING, figure_or_text, human_bytes
from ckptview.gui.base.palette import color
from ckptview.gui.base.wording import window_text
from ckptview.gui.base.workers import GeneratorWorker, JobSlot
from ckptview.gui.base.wrap import message_width, wrap_long_words
from ckptview.gui.checkpoint.host import CheckpointContext

COLUMNS = ("output", "shape", "dtype", "device", "mean", "std", "min", "max", "NaN", "Inf", "first values",
           "max |Δ| vs second")
# Devices probed once per session (a probe starts a worker process); panels share it.
_probed_devices: list[DeviceInfo] | None = None


def _remember_devices(devices: list[DeviceInfo]) -> None:
    global _probed_devices
    _probed_devices = devices


SOURCE_WORDS = {runner.TORCHSCRIPT: "TorchScript archive: runs its own graph",
                runner.EXPORT: "torch.export program (.pt2): runs its own graph",
                runner.STATE_DICT: "state dict: give the model code below",
                runner.PICKLE: "full-model pickle: running it imports code named in the file",
                runner.LIGHTNING: "Lightning checkpoint"}


CANCELLED_CONFIG = "its config.json was not read (cancelled): give model code below"


def _shown(found: list[str]) -> str:
    return ", ".join(found[:4]) + (" …" if len(found) > 4 else "")


def consent_text(items: list[tuple[str, list[str]]]) -> str:
    """The consent question: every file torch would load, each with what loading it imports and runs."""
    parts = []
    for path, found in items:
        names = "\n".join(f"  • {printable(name)}" for name in found[:30])  # record names come from the file
        more = f"\n  … and {len(found) - 30} more" if len(found) > 30 else ""
        parts.append(f"{printable(path)}\nLoading it imports and runs:\n{names}{more}")
    return ("\n\n".join(parts) + "\n\nOnly continue if you trust where "
            + ("these files come" if len(items) > 1 else "this file comes")
            + " from. It runs in a separate process, with your permissions.")


def ask_trust(parent: QWidget, items: list[tuple[str, list[str]]]) -> bool:
    """The confirmation dialog naming every file that needs consent and what loading each would import."""
    title = "Run code from these files?" if len(items) > 1 else "Run code from this file?"
    box = QMessageBox(QMessageBox.Icon.Warning, title, "",
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, parent)
    # A name of a few hundred characters is broken onto lines, so the box fits the screen with every one.
    box.setText(wrap_long_words(consent_text(items), box.fontMetrics(), message_width(parent)))
    box.setTextFormat(Qt.TextFormat.PlainText)  # names come from the files
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    return box.exec() == QMessageBox.StandardButton.Yes


def ask_model_class(parent: QWidget, path: str, classes: list[ModelClass]) -> str | None:
    """The class the user picks among those a model file defines (nn.Module subclasses first); None: cancelled."""
    names = [c.name for c in classes]
    name, ok = QInputDialog.getItem(parent, "Model class", f"Classes defined in {os.path.basename(path)}:",
                                    names, 0, False)
    return name if ok and name in names else None


class RunPanel(QWidget):
    """Device, model source, input, runs and timeout; Run/Cancel; a table of the outputs."""

    runFinished = Signal(object)  # the RunResult
    runFailed = Signal(str)  # the one-line error
    devicesChanged = Signal()
    # A URL's architecture was looked for (its config.json fetched in a worker): the Model line's new text.
    recognitionFinished = Signal(str)

    def __init__(self, context: CheckpointContext | None = None, path: str | None = None,
                 devices: list[DeviceInfo] | None = None,
                 confirm_trust: Callable[[list[tuple[str, list[str]]]], bool] | None = None,
                 pick_class: Callable[[str, list[ModelClass]], str | None] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.path = path or (context.path if context is not None else "")
        # What the panel shows and allows, without Qt (core/run/view_state.py): this widget renders it.
        self.state = RunViewState(self.path)
        # Asked with [(path, findings), ...] for every file torch would load that needs consent.
        self.confirm_trust = confirm_trust or (lambda items: ask_trust(self, items))
        # Asked with (model file, its classes) when the file defines more than one candidate.
        self.pick_class = pick_class or (lambda file, classes: ask_model_class(self, file, classes))
        # Run jobs mostly wait on a worker process, for as long as a run takes: `waits` slots run them in a
        # pool of their own, so they never hold the threads that statistics and histograms need.
        self.run_job = JobSlot(self, waits=True)
        self.run_job.yielded.connect(self._on_progress)
        self.run_job.returned.connect(self._on_result)
        self.run_job.errored.connect(lambda exc: self._show_error(message_of(exc), self.state.failed))
        self.run_job.aborted.connect(lambda: self._show_error("cancelled; the worker was stopped", self.state.cancelled))
        self.run_job.busy.connect(lambda busy: None if busy else self._show_buttons(ended=True))
        self.probe_job = JobSlot(self, waits=True)  # the devices, listed in a worker process
        self.probe_job.returned.connect(_remember_devices)
        self.probe_job.returned.connect(self.set_devices)
        self.probe_job.errored.connect(lambda exc: self.status_label.setText(f"devices: {exc}"))
        self.inspect_job = JobSlot(self, waits=True)  # the input signature of a graph archive
        self.inspect_job.returned.connect(self._set_prefill)
        self.recognize_job = JobSlot(self, waits=True)  # a URL's config.json, fetched off the GUI thread
        self.recognize_job.yielded.connect(self._on_recognize_progress)
        self.recognize_job.returned.connect(self._on_recognized)
        self.recognize_job.errored.connect(lambda exc: self._recognition_failed(message_of(exc), error=True))
        self.recognize_job.aborted.connect(lambda: self._recognition_failed(CANCELLED_CONFIG))
        # No hook on its end: each of the three above offers Run again, and a late one would end a run the
        # user started meanwhile.
        self._worker: GeneratorWorker | None = None  # the run in flight
        self._inspect: GeneratorWorker | None = None
        self._recognize: GeneratorWorker | None = None
        self._probe_wanted = devices is None
        self._prefill_wanted = True
        self._build()
        self.set_devices(devices or DEFAULT_DEVICES)
        self._describe_source()

    # ------------------------------------------------------------------------------------ layout

    def _build(self) -> None:
        self.device_combo = QComboBox()
        self.source_label = QLabel()
        self.source_label.setTextFormat(Qt.TextFormat.PlainText)  # names come from the file
        self.source_label.setWordWrap(True)
        self.model_edit = QLineEdit()
        self.model_edit.setPlaceholderText("package.module:factory  or  path/to/file.py:ClassName")
        self.model_browse = QPushButton("Browse…")
        self.model_browse.setToolTip("Pick the Python file of the model, then the class (the file is read, not run)")
        self.model_browse.clicked.connect(self._browse_model)
        model_row = QHBoxLayout()
        model_row.addWidget(self.model_edit)
        model_row.addWidget(self.model_browse)
        self.kwargs_edit = QLineEdit()
        self.kwargs_edit.setPlaceholderText('keyword arguments as JSON, e.g. {"width": 256}')
        self.input_edit = QLineEdit()
        self.input_edit.setPlaceholderText("2,20   or   2,3,224,224;2@int64=randint:0:10")
        self.input_edit.setToolTip("inputs separated by ';', each SHAPE[@DTYPE][=FILL]; fills: normal, zeros, "
                                   "ones, full:V, uniform:LO:HI, randint:LO:HI")
        self.runs_spin = QSpinBox()
        self.runs_spin.setRange(1, 10_000)
        self.runs_spin.setValue(10)
        self.timeout_spin = QDoubleSpinBox()
        self.timeout_spin.setRange(1, 24 * 3600)
        self.timeout_spin.setDecimals(0)
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setValue(runner.DEFAULT_TIMEOUT)
        self.allow_missing_box = QCheckBox("Allow missing weights (a partial load)")
        self.allow_missing_box.setToolTip("Run even when weights of the model are not in the file: they stay at "
                                          "their initial values, and every line of the result says so")
        self.compare_edit = QLineEdit()
        self.compare_edit.setPlaceholderText("optional: a second checkpoint of the same architecture")
        browse = QPushButton("…")
        browse.setToolTip("Run with another checkpoint: same input, shows the output difference")
        browse.clicked.connect(self._browse_compare)
        compare_row = QHBoxLayout()
        compare_row.addWidget(self.compare_edit)
        compare_row.addWidget(browse)

        form = QFormLayout()
        form.addRow("Device", self.device_combo)
        form.addRow("Model", self.source_label)
        form.addRow("Model code", model_row)
        form.addRow("Arguments", self.kwargs_edit)
        form.addRow("Input", self.input_edit)
        form.addRow("", self.allow_missing_box)
        # Two short figures share a row: at 1024x640 the rows above the results need every line they save
        # (the Model line wraps to three for a library that is missing).
        timing_row = QHBoxLayout()
        timing_row.addWidget(self.runs_spin, 1)
        timeout_label = QLabel("Timeout")
        timeout_label.setBuddy(self.timeout_spin)
        timing_row.addWidget(timeout_label)
        timing_row.addWidget(self.timeout_spin, 1)
        form.addRow("Timed runs", timing_row)
        form.addRow("Compare with", compare_row)

        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Run the forward pass (Ctrl+Return)")
        self.run_button.clicked.connect(self.start_run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the worker process (Escape)")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_run)
        self.copy_button = QPushButton("Copy result as JSON")
        self.copy_button.setToolTip("Copy the result as `ckptview run --json` prints it")
        self.copy_button.setEnabled(False)
        self.copy_button.clicked.connect(self.copy_result)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        buttons.addWidget(self.copy_button)
        context = Qt.ShortcutContext.WidgetWithChildrenShortcut  # only while focus is in this panel
        self.shortcuts: list[QShortcut] = []
        for key, slot in (("Ctrl+Return", self.start_run), ("Ctrl+Enter", self.start_run), ("Escape", self.cancel_run)):
            shortcut = QShortcut(QKeySequence(key), self)
            shortcut.setContext(context)
            shortcut.activated.connect(slot)
            self.shortcuts.append(shortcut)

        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary_label = QLabel("")
        self.summary_label.setTextFormat(Qt.TextFormat.PlainText)  # key names come from the file
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.status_label)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.table, 1)

    # ------------------------------------------------------------------------------------ devices

    def set_devices(self, devices: list[DeviceInfo]) -> None:
        """Fill the device combo; unavailable devices are greyed out with the reason as tooltip."""
        chosen = self.state.offer(devices, self.device_combo.currentData())
        self.device_combo.clear()
        model = self.device_combo.model()
        for dev in devices:
            label = dev.name if dev.available else f"{dev.name} (unavailable)"
            self.device_combo.addItem(label, dev.name)
            row = self.device_combo.count() - 1
            tip = dev.reason if not dev.available else ", ".join(
                p for p in (dev.description, f"capability {dev.capability}" if dev.capability else "",
                            f"{dev.free_memory / 2**30:.1f} GiB free" if dev.free_memory else "") if p)
            self.device_combo.setItemData(row, tip, Qt.ItemDataRole.ToolTipRole)
            if not dev.available and isinstance(model, QStandardItemModel):
                item = model.item(row)
                item.setEnabled(False)
        self.select_device(chosen)
        self.devicesChanged.emit()

    def select_device(self, name: str) -> bool:
        """Select `name` when it is listed and available."""
        index = self.device_combo.findData(name)
        if index < 0 or not self.state.available(name):
            return False
        self.device_combo.setCurrentIndex(index)
        return True

    def device(self) -> str:
        """The chosen device name."""
        return str(self.device_combo.currentData() or "cpu")

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        """Probe devices and read the input signature once, when the panel is first shown."""
        super().showEvent(event)
        if self._probe_wanted:
            self._probe_wanted = False
            if _probed_devices is not None:
                self.set_devices(_probed_devices)
            else:
                self.probe_job.start(runner.probe_devices)
        if self._prefill_wanted:
            self._prefill_wanted = False
            self.recognize_remote()
            self.prefill_inputs()

    # ------------------------------------------------------------------------------------ source and inputs

    def _describe_source(self) -> None:
        if self.path:
            try:
                self.state.classified(runner.classify_source(self.path, checkpoint=self._checkpoint()))
            except CheckpointError as exc:
                self.state.classified(None, message_of(exc))
            else:
                self.state.name_local(self._checkpoint())
        self._show_source()
        if self.state.source is None:
            return
        needs_code = self.state.needs_code()
        self.model_edit.setEnabled(needs_code)
        self.model_browse.setEnabled(needs_code)
        self.kwargs_edit.setEnabled(needs_code)

    def _show_source(self) -> None:
        """The Model line: what the file is, the architecture its library names (or why none), what runs."""
        self.source_label.setText(model_words(self.state.model_line(), self.state.source))

    def recognize_remote(self) -> bool:
        """A URL's architecture, as for a local folder, but its config.json is fetched in a worker (progress
        in the status line, Cancel stops it); on the way Run waits. False when there is nothing to fetch."""
        if not self.state.fetches_config() or not self.state.recognizing("reading the model's config.json…"):
            return False
        checkpoint = self._checkpoint()  # the open tab's keys and shapes (metadata in memory, no I/O)
        tensors = find_state_dict(checkpoint)[1] if checkpoint is not None else None
        self._show_source()
        self.status_label.setText("reading the model's config.json…")
        self._show_buttons()
        self._recognize = self.recognize_job.start(recognize_url, self.path, tensors, options=self._remote())
        return True

    def _on_recognize_progress(self, progress: object) -> None:
        if isinstance(progress, Progress) and progress.message:
            done = f" ({human_bytes(progress.done)} of {human_bytes(progress.total)})" if progress.total else ""
            self.status_label.setText(_escape(printable(redact(progress.message) + done)) + "…")

    def _on_recognized(self, arch: Architecture | None) -> None:
        self.state.named(arch)
        self._show_source()
        self.status_label.setText("")
        if arch is not None:
            self._declared_placeholder()
        elif self._checkpoint() is not None:  # no config names one: the first layer's guess, as for a local file
            self._set_prefill(suggest_inputs(self.path, self._checkpoint()))
        self._show_buttons()  # the answer is here: Run is offered before anyone hears of it
        self.recognitionFinished.emit(self.source_label.text())

    def _recognition_failed(self, message: str, error: bool = False) -> None:
        """A refusal (auto_map, library missing) or a config that cannot be read: one line, no URL secrets."""
        if error and self._recognize is not None and self._recognize.token.cancelled:
            message, error = CANCELLED_CONFIG, False  # the request Cancel cut short failed on its way out
        message = window_text(rephrased(message, lambda said: redact(said.splitlines()[0] if said else "unknown error")))
        self.state.named(None, message)
        self._show_source()
        self.status_label.setText(f"<span style='color:{color('error').name()}'>{_escape(printable(message))}</span>"
                                  if error
                                  else "")
        self.status_label.setToolTip(message if error else "")
        self._show_buttons()  # the answer is here: Run is offered before anyone hears of it
        self.recognitionFinished.emit(self.source_label.text())

    def _checkpoint(self) -> Any:
        """The tab's already-opened checkpoint (saves re-reading its metadata on the GUI thread)."""
        return self.context.checkpoint if self.context is not None and self.context.path == self.path else None

    def prefill_inputs(self) -> None:
        """Fill the input field from the graph (TorchScript/.pt2, read in a worker) or a first-layer guess."""
        if self.input_edit.text() or not self.path or self.state.source is None:
            return
        if self.state.source.kind in (runner.TORCHSCRIPT, runner.EXPORT):
            # ckptview's own reading of the graph (the .pt2's JSON); nothing is loaded, nothing from the file runs.
            self._inspect = self.inspect_job.start(runner.inspect_inputs, self.path)
        elif self.state.arch is not None:
            self._declared_placeholder()  # what the model declares, decided where the model is (the worker)
        elif self.state.phase is Phase.RECOGNIZING:
            pass  # the architecture's inputs, or the guess, when its config.json has been read
        else:
            self._set_prefill(suggest_inputs(self.path, self._checkpoint()))

    def _declared_placeholder(self) -> None:
        """An architecture its library names declares its inputs: left empty, the run makes those (as the
        command line does with no --input-shape); typed specs with names go in by keyword."""
        self.input_edit.setPlaceholderText("empty: the inputs the model declares (its forward, config, "
                                           "preprocessor)   or   input_ids:1,8@int64=randint:0:100")

    def _set_prefill(self, specs: Any) -> None:
        if specs and not self.input_edit.text():
            self.input_edit.setText(describe_inputs(specs))

    def _browse_model(self) -> None:
        start = os.path.dirname(self.model_edit.text().rpartition(":")[0]) or os.path.dirname(self.path)
        path, _ = QFileDialog.getOpenFileName(self, "Model code", start, "Python files (*.py);;All files (*)")
        if path:
            self.choose_model_class(path)

    def choose_model_class(self, path: str) -> bool:
        """Fill the model field with `path:Class`, the class picked among those the file defines (never run)."""
        try:
            classes = classes_in_file(path)
        except ModelCodeError as exc:
            self._show_error(message_of(exc), self.state.refused_start)
            return False
        modules = [c for c in classes if c.is_module]
        candidates = modules + [c for c in classes if not c.is_module]
        if not candidates:
            self._show_error(f"{os.path.basename(path)} defines no class", self.state.refused_start)
            return False
        name = candidates[0].name if len(modules) == 1 or len(candidates) == 1 else self.pick_class(path, candidates)
        if not name:
            return False
        self.model_edit.setText(f"{path}:{name}")
        self.status_label.setText("")
        return True

    def _browse_compare(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Second checkpoint", os.path.dirname(self.path))
        if path:
            self.compare_edit.setText(path)

    # ------------------------------------------------------------------------------------ running

    def build_request(self) -> runner.RunRequest:
        """The request from the fields; RunError (kind 'input') naming the bad field."""
        try:
            kwargs = json.loads(self.kwargs_edit.text() or "{}")
        except ValueError as exc:
            raise RunError(f"arguments are not JSON: {exc}", kind="input") from None
        if not isinstance(kwargs, dict):
            raise RunError("arguments must be a JSON object", kind="input")
        try:
            inputs = parse_input_specs(self.input_edit.text()) if self.input_edit.text().strip() else None
        except InputSpecError as exc:
            raise RunError(f"input: {exc}", kind="input") from None
        return runner.RunRequest(
            path=self.path, device=parse_device(self.device()), model=self.model_edit.text().strip() or None,
            model_kwargs=kwargs, inputs=inputs, runs=self.runs_spin.value(),
            timeout=float(self.timeout_spin.value()), compare_path=self.compare_edit.text().strip() or None,
            allow_missing=self.allow_missing_box.isChecked())

    def start_run(self) -> bool:
        """Start the job off the GUI thread; False (with the reason shown) when it cannot start."""
        if not self.state.can_start():
            return False
        try:
            request = self.build_request()
            source = runner.classify_source(request.path, request.model, self._checkpoint())
            # model code (or an architecture its library knows) first; consent below
            runner.check_trust(source, True, bool(request.model) or self.state.arch is not None)
            second = runner.compare_source(source, request.compare_path)
            wanted = self.state.consent_wanted([(request.path, source.findings),
                                                (request.compare_path, second.findings if second else [])])
            if wanted:
                if not self.confirm_trust(wanted):
                    self._show_error("not run: " + ("the files were" if len(wanted) > 1 else "the file was")
                                     + " not trusted", self.state.refused_start)
                    return False
                self.state.consented(wanted)
            if source.findings:
                request.trust, request.trusted_findings = True, self.state.trusted[request.path]
            if second is not None and second.findings and request.compare_path:
                request.trust_compare = True
                request.compare_trusted_findings = self.state.trusted[request.compare_path]
        except CheckpointError as exc:
            self._show_error(message_of(exc), self.state.refused_start)
            return False
        self.state.starting()
        self.copy_button.setEnabled(False)
        self.table.setRowCount(0)
        self.summary_label.setText("")
        self.status_label.setText("starting the worker…")
        self._show_buttons()
        self._worker = self.run_job.start(runner.run_iter, request, remote=self._remote())
        return True

    def _remote(self) -> RemoteOptions | None:
        """How this window reads URLs (its command line's --download, --deadline, ...): its workspace's."""
        window = self.context.window if self.context is not None else None
        return window.workspace.remote if window is not None else None

    def copy_result(self) -> bool:
        """Put the last result on the clipboard as `ckptview run --json` prints it; False when there is none."""
        if self.state.result is None:
            return False
        QGuiApplication.clipboard().setText(result_json_text(self.state.result))
        return True

    def cancel_run(self) -> None:
        """Kill the worker process (the job notices within a poll interval), or stop reading a URL's config."""
        for job in (self.run_job, self.recognize_job):
            if job.running:
                self.status_label.setText("cancelling…")
                job.stop()

    @property
    def result(self) -> RunResult | None:
        """The last run's result (None before one, while one runs, after an error)."""
        return self.state.result

    @property
    def last_error(self) -> str:
        """The last error shown, one line."""
        return self.state.error

    def is_running(self) -> bool:
        """True while a run is in flight."""
        return self.state.running()

    def _show_buttons(self, ended: bool = False) -> None:
        """Run while it may start, Cancel while something is in flight (`ended`: the run's job is over)."""
        if ended:
            self.state.ended()
            self._worker = None
        self.run_button.setEnabled(self.state.can_start())
        self.cancel_button.setEnabled(self.state.busy)

    def _on_progress(self, progress: object) -> None:
        self.state.progressed()
        if isinstance(progress, Progress) and progress.message:
            self.status_label.setText(f"{phase_words(progress.message)}…")

    def _show_error(self, message: str, record: Callable[[str], None]) -> None:
        """Show an error; `record` is the state's word for what it ended (a run failed, cancelled, refused)."""
        message = window_text(message)
        record(message)
        self.status_label.setText(f"<span style='color:{color('error').name()}'>{_escape(printable(message))}</span>")
        self.status_label.setToolTip(message)
        self.runFailed.emit(message)

    def _on_result(self, result: RunResult) -> None:
        self.state.finished(result)
        self.copy_button.setEnabled(True)
        device = _escape(printable(result.device))
        partial = result.partial or []
        if partial:  # asked for (Allow missing weights): said in the status, the summary and every row
            named = ", ".join(partial[:5]) + (" …" if len(partial) > 5 else "")
            self.status_label.setText(f"<span style='color:{color('warning').name()}'>partial load on {device}: "
                                      f"{len(partial)} weight(s) of the model are not from the file (left at their "
                                      f"initial values): {_escape(printable(named))}</span>")
        elif result.warnings:
            self.status_label.setText(f"<span style='color:{color('warning').name()}'>done on {device}, but "
                                      f"{len(result.warnings)} kind(s) of weights did not load (see below)</span>")
        else:
            self.status_label.setText(f"done on {device}")
        self.summary_label.setText(summary_text(result))
        diffs = {d.name: d for d in result.compare.diff} if result.compare is not None else {}
        self.table.setRowCount(len(result.outputs))
        for row, out in enumerate(result.outputs):
            stats = out.stats
            diff = diffs.get(out.name)
            cells = [f"{out.name} (partial load)" if partial else out.name,
                     "×".join(str(s) for s in out.shape) or "scalar", out.dtype, out.device,
                     *(figure_or_text(v, ".6g") for v in ((stats.mean, stats.std, stats.min, stats.max) if stats else (None,) * 4)),
                     str(stats.nan) if stats else MISSING, str(stats.inf) if stats else MISSING,
                     ", ".join(figure_or_text(v, ".6g") for v in (out.first or [])),
                     figure_or_text(diff.max_abs_diff, ".6g") if diff is not None else ""]
            for col, text in enumerate(cells):
                self.table.setItem(row, col, QTableWidgetItem(printable(text)))
        self.table.resizeColumnsToContents()
        self.runFinished.emit(result)


def model_words(line: ModelLine, source: runner.SourceInfo | None) -> str:
    """The Model line's words for the state's `ModelLine`: what the file is, the architecture its library
    names (or why none), what trusting it runs."""
    if line.line is Line.NO_CHECKPOINT:
        return "no checkpoint"
    if line.line is Line.UNREADABLE or source is None:
        return window_text(line.detail)
    words = SOURCE_WORDS[line.kind]
    if source.lightning is not None:
        words = printable(lightning_words(source))  # its version and class come from the file
    if line.line is Line.PENDING:
        words = f"state dict: {line.detail}"
    elif line.line is Line.BUNDLED:
        words = ("the bundled example: ckptview's own MLP (Linear 20→256, ReLU, Linear 256→10) runs it; "
                 "Run needs nothing more")
    elif line.line is Line.ARCHITECTURE:
        words = f"state dict: {line.detail}, built by the installed library (or give model code below)"
    elif line.line is Line.REFUSED:
        words = f"state dict: {window_text(line.detail)}"
    if line.programs:  # TorchScript, .pt2 programs, libraries: asked once
        words += f"; loading it runs code from the file ({printable(_shown(list(line.programs)))}), only if you trust it"
    if line.findings:
        words += f"; its pickles name code ({printable(_shown(list(line.findings)))}): it runs only if you trust it"
    return words


def lightning_words(source: runner.SourceInfo) -> str:
    """The Model line of a Lightning checkpoint: the class the file names and that importing it needs consent."""
    lightning = source.lightning
    assert lightning is not None
    if not lightning.class_path:
        return (f"Lightning {lightning.version} checkpoint naming no LightningModule class: give it in the Model "
                f"code field (its init arguments come from hyper_parameters)")
    return (f"Lightning checkpoint: {lightning.describe()}; importing that class runs code chosen by the file, "
            f"only if you trust it (Run asks), or give your own class in the Model code field")


def summary_text(result: RunResult) -> str:
    """What the run found, above the table of outputs: the core's lines of a result (`result_lines`, as
    the CLI prints them) and its warnings."""
    mark = f"  {partial_words(result)}" if result.partial else ""
    return printable_lines(result_lines(result, outputs=False) + [f"warning: {w}{mark}" for w in result.warnings])


def printable_lines(lines: list[str]) -> str:
    """Lines joined by newlines, each with control characters escaped (names come from files)."""
    return "\n".join(printable(line) for line in lines)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
