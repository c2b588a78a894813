"""The run worker split into protocol / loading / forward: each part small and importable on its own, the
worker's entry points still answer, and the parent's side imports neither torch nor numpy."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

from ckptview.core.jobs import drain
from ckptview.core.run import request as runner
from ckptview.core.run.model_classes import ModelCodeError, classes_in_file
from ckptview.core.run.process import RunError, execute
from ckptview.core.run.protocol import PhaseEvent, ResultMessage, parse_message
from tests.support.paths import SRC

CORE = SRC / "core"
PARTS = ("run/request", "run/process", "worker/entry", "run/protocol", "run/result", "run/json_checks",
         "worker/loading", "worker/model_code", "worker/forward", "worker/compare")


def test_each_part_is_a_small_module_with_one_job() -> None:
    for name in PARTS:
        lines = (CORE / f"{name}.py").read_text().count("\n")
        assert lines < 450, f"{name}.py has {lines} lines"


@pytest.mark.parametrize("module", ["ckptview.core.run.request", "ckptview.core.run.process", "ckptview.core.run.protocol",
                                    "ckptview.core.run.result",
                                    "ckptview.core.worker.entry", "ckptview.commands.run",
                                    "ckptview.core.run.model_classes"])
def test_importing_a_part_imports_neither_torch_nor_numpy(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def _messages(stdout: bytes) -> list[PhaseEvent | ResultMessage]:
    return [m for m in (parse_message(line) for line in stdout.splitlines()) if m is not None]


def test_python_dash_m_run_worker_still_answers() -> None:
    """`python -m ckptview.core.worker.entry`: phase events then one result, on stdout, for a request on stdin."""
    proc = subprocess.run([sys.executable, "-m", "ckptview.core.worker.entry"], input=b'{"op": "devices"}',
                          capture_output=True, timeout=120)
    messages = _messages(proc.stdout)
    assert proc.returncode == 0 and messages[0] == PhaseEvent("importing torch")
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.ok
    assert "cpu" in [d["name"] for d in result.payload["devices"]]


def test_isolated_worker_refuses_a_bad_request_as_one_line() -> None:
    """The bootstrap the runner starts (`python -I`, private folder): bad requests fail as 'protocol'."""
    with pytest.raises(RunError, match="^unknown request 'bogus'$") as err:
        drain(execute({"op": "bogus"}, timeout=120))
    assert err.value.kind == "protocol"
    with pytest.raises(RunError, match="^the request is not a JSON object$"):
        drain(execute([1, 2], timeout=120))  # type: ignore[arg-type]


def test_a_malformed_result_from_the_worker_is_a_protocol_error(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: pathlib.Path) -> None:
    """What the worker sends is checked: a result of the wrong shape is one line, kind 'protocol'."""
    import torch

    torch.save({"w": torch.zeros(2)}, tmp_path / "sd.pt")

    def fake_execute(request: dict, timeout: float, token: object = None):  # noqa: ANN202 - a generator
        yield from ()
        return {"device": "cpu", "load": {"missing": "not a list"}}

    monkeypatch.setattr(runner, "execute", fake_execute)
    with pytest.raises(RunError, match=r"^the worker sent a malformed result: load\.missing: expected a list$") as err:
        runner.run(runner.RunRequest(str(tmp_path / "sd.pt"), model="m:f"))
    assert err.value.kind == "protocol"


def test_model_classes_are_read_without_running_the_file(tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "ran.marker"
    code = tmp_path / "m.py"
    code.write_text(textwrap.dedent(f'''
        # -*- coding: utf-8 -*-
        import torch.nn as nn
        import lightning.pytorch as pl
        open({str(marker)!r}, "w").close()

        class Config:
            "état"

        @some_decorator
        class Base(nn.Module):
            pass

        class Net(Base):
            pass

        class Lit(pl.LightningModule):
            pass

        def make():
            class Inner(nn.Module):
                pass
            return Inner()
    '''))
    found = classes_in_file(str(code))
    assert [(c.name, c.is_module) for c in found] == [("Config", False), ("Base", True), ("Net", True),
                                                       ("Lit", True)]
    assert found[1].line == 11 and not marker.exists()
    (tmp_path / "nul.py").write_bytes(b"class A:\n    pass\x00\n")
    with pytest.raises(ModelCodeError, match="^nul.py"):
        classes_in_file(str(tmp_path / "nul.py"))
    with pytest.raises(ModelCodeError, match="^cannot read"):
        classes_in_file(str(tmp_path / "missing.py"))
    deep = tmp_path / "deep.py"
    deep.write_text("x = " + "(" * 100_000 + ")" * 100_000 + "\n")
    with pytest.raises(ModelCodeError, match="^deep.py"):
        classes_in_file(str(deep))


def test_worker_messages_are_json_lines() -> None:
    assert json.loads(json.dumps(PhaseEvent("loading").to_json())) == {"event": "phase", "phase": "loading"}
    failed = ResultMessage(False, {"traceback": "tb"}, "boom", "oom").to_json()
    assert failed == {"event": "result", "ok": False, "error": "boom", "kind": "oom", "traceback": "tb"}
