"""The Run panel's state without Qt (`core/run/view_state.py`): its phase, whether Run may start, the Model
line it shows, the devices it offers, the consent it remembers; what `RunPanel` renders, driven bare."""

from __future__ import annotations

import subprocess
import sys
from typing import cast

from ckptview.core.run import request as runner
from ckptview.core.run.architectures import Architecture
from ckptview.core.run.devices import DeviceInfo
from ckptview.core.run.result import RunResult
from ckptview.core.run.view_state import Line, Phase, RunViewState

RESULT = cast(RunResult, object())  # the state only holds it


def test_the_state_modules_import_no_qt() -> None:
    """The three widgets' states load in a process where Qt never is."""
    code = ("import sys\n"
            "import ckptview.core.run.view_state, ckptview.core.graph.view_state, ckptview.core.series.view_state\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph')]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_run_goes_from_idle_to_done_and_run_waits_meanwhile() -> None:
    state = RunViewState("/m.pt")
    assert state.phase is Phase.IDLE and state.can_start() and not state.busy
    assert state.starting() and state.phase is Phase.STARTING and state.running()
    assert not state.can_start() and not state.starting()  # one run at a time
    state.progressed()
    assert state.phase is Phase.RUNNING
    state.finished(RESULT)
    assert state.phase is Phase.DONE and state.result is RESULT and state.can_start()
    state.ended()  # the job's end after its result changes nothing
    assert state.phase is Phase.DONE
    assert state.starting() and state.result is None  # a new run drops the last result


def test_a_run_fails_or_is_cancelled_with_its_words() -> None:
    state = RunViewState("/m.pt")
    state.starting()
    state.failed("the worker died")
    assert state.phase is Phase.FAILED and state.error == "the worker died" and state.can_start()
    state.starting()
    assert state.error == ""
    state.cancelled("cancelled; the worker was stopped")
    assert state.phase is Phase.CANCELLED and not state.running() and state.can_start()
    state.starting()
    state.ended()  # a job dropped without a word leaves the panel idle, Run offered again
    assert state.phase is Phase.IDLE and state.can_start()


def test_an_error_while_a_run_is_in_flight_does_not_end_it() -> None:
    state = RunViewState("/m.pt")
    state.refused_start("input: 'x' is not a size")
    assert state.phase is Phase.FAILED and state.error.startswith("input")
    state.starting()
    state.refused_start("broken.py is not valid Python")  # a model file picked meanwhile
    assert state.phase is Phase.STARTING and state.running() and state.error == "broken.py is not valid Python"


def test_run_waits_while_a_urls_config_is_read() -> None:
    state = RunViewState("https://host/model/")
    state.classified(runner.SourceInfo(runner.STATE_DICT))
    assert state.recognizing("reading the model's config.json…")
    assert state.phase is Phase.RECOGNIZING and state.busy and not state.running() and not state.can_start()
    assert state.model_line().line is Line.PENDING and state.model_line().detail.startswith("reading")
    assert not state.starting() and not state.recognizing("again")
    state.named(Architecture("transformers", "BertModel", "config.json"))
    assert state.phase is Phase.IDLE and state.can_start() and state.pending == ""
    assert state.model_line().line is Line.ARCHITECTURE and "BertModel" in state.model_line().detail


def test_the_model_line_follows_the_source_and_what_trusting_it_runs() -> None:
    assert RunViewState("").model_line().line is Line.NO_CHECKPOINT
    state = RunViewState("/m.pt")
    state.classified(None, "not a checkpoint")
    assert state.model_line().line is Line.UNREADABLE and state.model_line().detail == "not a checkpoint"
    assert not state.needs_code()
    state.classified(runner.SourceInfo(runner.TORCHSCRIPT, findings=["code.m", "posix.system"], programs=["code.m"]))
    line = state.model_line()
    assert line.line is Line.SOURCE and line.programs == ("code.m",) and line.findings == ("posix.system",)
    assert not state.needs_code()
    state.classified(runner.SourceInfo(runner.PICKLE, findings=["m.Net"]))
    assert state.needs_code() and state.model_line().findings == ()  # a pickle's line names its findings itself
    state.classified(runner.SourceInfo(runner.STATE_DICT))
    state.named(None, "its config.json names auto_map code")
    assert state.model_line().line is Line.REFUSED and "auto_map" in state.model_line().detail
    state.named(Architecture("ckptview", "ExampleMLP", "keys and shapes"))
    assert state.model_line().line is Line.BUNDLED


def test_devices_keep_the_choice_while_it_is_available() -> None:
    state = RunViewState("/m.pt")
    assert [d.name for d in state.devices] == ["cpu", "meta"]
    gpu = DeviceInfo("cuda:0", "cuda", True)
    assert state.offer([DeviceInfo("cpu", "cpu", True), gpu], "cuda:0") == "cuda:0"
    assert state.offer([DeviceInfo("cpu", "cpu", True), DeviceInfo("cuda:0", "cuda", False, reason="busy")],
                       "cuda:0") == "cpu"
    assert not state.available("cuda:0") and state.available("cpu") and not state.available("mps")
    assert state.offer([], None) == "cpu"


def test_consent_is_asked_once_per_file_and_again_when_its_code_changes() -> None:
    state = RunViewState("/a.pt")
    files: list[tuple[str | None, list[str]]] = [("/a.pt", ["m.Net"]), (None, []), ("/b.pt", [])]
    assert state.consent_wanted(files) == [("/a.pt", ["m.Net"])]
    state.consented([("/a.pt", ["m.Net"])])
    assert state.consent_wanted(files) == []
    assert state.consent_wanted([("/a.pt", ["m.Net", "os.system"])]) == [("/a.pt", ["m.Net", "os.system"])]
