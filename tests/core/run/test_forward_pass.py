"""The forward-pass runner: every model source, the load report, isolation of crashes, hangs and errors.

Each test that starts a worker costs ~1-2 s (it imports torch), so the spawning tests are few and each one
checks several things. The decision logic (sources, trust, prefixes, inputs) is tested in-process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
import torch

from ckptview import cli
from ckptview.commands.wording import cli_words
from ckptview.core import open_checkpoint
from ckptview.core.jobs import CancelToken
from ckptview.core.message import Fix, Hint, hints_of
from ckptview.core.run.input_specs import (
    InputSpec,
    InputSpecError,
    load_input_file,
    make_array,
    parse_input_specs,
)
from ckptview.core.run.process import RunError, _death_message
from ckptview.core.run.protocol import Job, WorkerError, error_kind
from ckptview.core.run.request import (
    EXPORT,
    PICKLE,
    STATE_DICT,
    TORCHSCRIPT,
    RunRequest,
    check_trust,
    classify_source,
    run,
)
from ckptview.core.run.result import OtherOutput, OutputInfo, RunResult, ShapeMismatch
from ckptview.core.run.state_dict import find_state_dict, strip_prefixes, suggest_inputs
from ckptview.core.worker.entry import load_model
from ckptview.core.worker.forward import describe_outputs, to_torch
from ckptview.core.worker.tensors import numpy_to_torch, place_tensor

MODULE = "ckv_test_models"
MODEL_CODE = textwrap.dedent('''
    import ctypes, os, time
    import torch
    from torch import nn

    HERE = os.path.dirname(os.path.abspath(__file__))

    class MLP(nn.Module):
        """The README's MLP."""
        def __init__(self, width=256):
            super().__init__()
            self.hidden = nn.Linear(20, width)
            self.act = nn.ReLU()
            self.output = nn.Linear(width, 10)

        def forward(self, x):
            print("user code prints to stdout")  # must not corrupt the worker's result stream
            return self.output(self.act(self.hidden(x)))

    class Other(nn.Module):
        """Differs from MLP: `head` instead of `output`, and a configurable width."""
        def __init__(self, width=256):
            super().__init__()
            self.hidden = nn.Linear(20, width)
            self.act = nn.ReLU()
            self.head = nn.Linear(width, 10)

        def forward(self, x):
            return self.head(self.act(self.hidden(x)))

    class Bad(MLP):
        def __init__(self, mode="raise"):
            super().__init__()
            self.mode = mode

        def forward(self, x):
            if self.mode == "raise":
                raise ValueError("boom in user code")
            with open(os.path.join(HERE, "worker.pid"), "w") as fh:
                fh.write(str(os.getpid()))
            if self.mode == "hang":
                time.sleep(600)
            if self.mode == "segfault":
                ctypes.string_at(0)
            os._exit(3)

    class Marked(MLP):
        """Unpickling it leaves a marker file: proof that code from the file ran."""
        def __setstate__(self, state):
            with open(os.path.join(HERE, "unpickled.marker"), "w") as fh:
                fh.write("ran")
            super().__setstate__(state)

    class Pair(nn.Module):
        """Two inputs: `y` scales what `x` gives."""
        def __init__(self):
            super().__init__()
            self.hidden = nn.Linear(20, 10)

        def forward(self, x, y):
            return self.hidden(x) * y

    def quantized():
        """The MLP as torch.ao's dynamic quantization makes it (int8 Linear layers, packed parameters)."""
        import warnings
        with warnings.catch_warnings():  # torch 2.13 deprecates torch.ao; such files are still written and run
            warnings.simplefilter("ignore")
            return torch.ao.quantization.quantize_dynamic(MLP().eval(), {nn.Linear}, dtype=torch.qint8)

    def gpt2_from_config():
        """A transformers model built by its factory, as user code does (`from_config`)."""
        import transformers
        config = transformers.GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2, n_positions=32)
        return transformers.AutoModelForCausalLM.from_config(config)
''')


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The MLP as state dict, training checkpoint, TorchScript, .pt2 and full pickle, plus its code."""
    folder = tmp_path_factory.mktemp("runner")
    (folder / f"{MODULE}.py").write_text(MODEL_CODE)
    sys.path.insert(0, str(folder))
    try:
        import ckv_test_models as models
    finally:
        sys.path.remove(str(folder))
    torch.manual_seed(0)
    mlp = models.MLP().eval()
    other = models.MLP().eval()  # a second set of weights for "run with another checkpoint"
    paths = {name: str(folder / name) for name in
             ("sd.pt", "train.pt", "ts.pt", "m.pt2", "full.pt")}
    torch.save(mlp.state_dict(), paths["sd.pt"])
    wrapped = {f"module.{k}": v for k, v in other.state_dict().items()}  # as DataParallel saves it
    torch.save({"epoch": 3, "model_state_dict": wrapped, "optimizer_state_dict": {"state": {}}},
               paths["train.pt"])
    example = torch.randn(2, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript; files still exist
        torch.jit.save(torch.jit.trace(mlp, example), paths["ts.pt"])
    torch.export.save(torch.export.export(mlp, (example,)), paths["m.pt2"])
    marked = models.Marked()
    marked.load_state_dict(mlp.state_dict())
    torch.save(marked, paths["full.pt"])
    (folder / "unpickled.marker").unlink(missing_ok=True)  # torch.save does not unpickle; be sure
    yield {"folder": str(folder), "models": models, "mlp": mlp, "other": other,
           "code": str(folder / f"{MODULE}.py"), **paths}
    sys.modules.pop(MODULE, None)


def reference(model: torch.nn.Module, specs: list[InputSpec], seed: int = 0) -> torch.Tensor:
    """What the model gives in this process on the input the worker makes from the same spec."""
    inputs = [to_torch(make_array(s, seed, i), s.dtype, "cpu") for i, s in enumerate(specs)]
    with torch.no_grad():
        return model(*inputs)


def assert_stats_match(out: OutputInfo | dict, tensor: torch.Tensor) -> None:
    if isinstance(out, dict):  # as printed by --json
        out = OutputInfo.from_json(out)
    t = tensor.double()
    assert out.shape == list(tensor.shape) and out.stats is not None and out.first is not None
    assert out.stats.mean == pytest.approx(float(t.mean()), rel=1e-6, abs=1e-9)
    assert out.stats.std == pytest.approx(float(t.std()), rel=1e-6, abs=1e-9)  # sample std, like stats.py
    assert out.stats.min == pytest.approx(float(t.min()))
    assert out.stats.max == pytest.approx(float(t.max()))
    assert out.first == pytest.approx(tensor.reshape(-1)[: len(out.first)].tolist())


# ------------------------------------------------------------------------------------------ spawning tests


@pytest.mark.slow
def test_state_dict_with_model_file_via_cli_json(files: dict, capsys: pytest.CaptureFixture) -> None:
    """State dict + model file through `ckptview run --json`, then the same input on a training checkpoint."""
    status = cli.main(["run", files["sd.pt"], "--device", "cpu", "--model", f"{files['code']}:MLP",
                       "--input-shape", "3,20", "--runs", "3", "--compare", files["train.pt"], "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    result = json.loads(captured.out)
    # the contract's keys
    assert {"device", "load_seconds", "load", "outputs", "latency_ms", "peak_memory_bytes"} <= set(result)
    assert {"missing", "unexpected", "mismatched"} <= set(result["load"])
    assert {"name", "shape", "dtype", "stats"} <= set(result["outputs"][0])
    assert {"median", "min", "max"} <= set(result["latency_ms"])
    assert result["device"] == "cpu" and result["source"] == STATE_DICT
    assert result["load"]["missing"] == result["load"]["unexpected"] == result["load"]["mismatched"] == []
    assert result["load"]["tensors"] == 4 and result["load"]["bytes_moved"] == 4 * (256 * 20 + 256 + 2560 + 10)
    assert result["latency_ms"]["runs"] == 3
    assert result["latency_ms"]["min"] <= result["latency_ms"]["median"] <= result["latency_ms"]["max"]
    assert result["peak_memory_bytes"] > 0
    specs = [InputSpec(shape=(3, 20))]
    expected = reference(files["mlp"], specs)
    (out,) = result["outputs"]
    assert out["name"] == "output" and out["dtype"] == "float32" and out["device"] == "cpu"
    assert_stats_match(out, expected)
    # the second checkpoint: nested `model_state_dict`, `module.` stripped, same input, output difference
    compare = result["compare"]
    assert compare["load"]["state_dict_key"] == "model_state_dict"
    assert compare["load"]["stripped_prefixes"] == ["module."]
    assert compare["load"]["missing"] == compare["load"]["unexpected"] == []
    other = reference(files["other"], specs)
    assert_stats_match(compare["outputs"][0], other)
    (diff,) = compare["diff"]
    assert diff["equal"] is False
    assert diff["max_abs_diff"] == pytest.approx(float((expected - other).abs().max()), rel=1e-5)


@pytest.mark.slow
def test_torchscript_graph_input_and_compare_with_pt2(files: dict) -> None:
    """TorchScript runs with the traced input signature; a .pt2 of the same weights gives the same output."""
    result = run(RunRequest(files["ts.pt"], runs=2, compare_path=files["m.pt2"], trust=True, trust_compare=True))
    assert result.source == TORCHSCRIPT
    (inp,) = result.inputs
    assert inp.shape == [2, 20] and inp.dtype == "float32" and inp.origin == "graph"
    expected = reference(files["mlp"], [InputSpec(shape=(2, 20))])
    assert_stats_match(result.outputs[0], expected)
    assert result.compare is not None
    (diff,) = result.compare.diff
    assert diff.max_abs_diff is not None and diff.max_abs_diff < 1e-5  # the .pt2 holds the same weights


@pytest.mark.slow
def test_pt2_on_meta(files: dict) -> None:
    """`.pt2` on meta: the input shape comes from the exported graph; outputs have shapes, no values."""
    result = run(RunRequest(files["m.pt2"], device="meta", runs=1, trust=True))
    assert result.source == EXPORT and result.device == "meta"
    assert result.inputs[0].origin == "graph" and result.inputs[0].shape == [2, 20]
    (out,) = result.outputs
    assert out.shape == [2, 10] and out.device == "meta" and out.stats is None and out.first is None
    assert result.load.bytes_moved == 0  # meta tensors hold no bytes
    assert result.load.tensor_bytes == 4 * (256 * 20 + 256 + 2560 + 10)


def test_no_weights_loaded_fails_loudly_with_the_load_report(files: dict) -> None:
    """Wrong model class: nothing fits, so the run fails (kind 'weights') and still reports every key."""
    with pytest.raises(RunError, match=r"^no weights loaded: none of the checkpoint's 4 tensors fit") as err:
        run(RunRequest(files["sd.pt"], model=f"{MODULE}:Other", model_kwargs={"width": 128},
                       inputs=parse_input_specs("2,20"), runs=1, cwd=files["folder"]))
    assert err.value.kind == "weights"
    assert "2 missing keys" in str(err.value) and "2 unexpected keys" in str(err.value)
    load = err.value.load
    assert isinstance(err.value.result, RunResult) and load is err.value.result.load
    assert sorted(load.missing) == ["head.bias", "head.weight"]
    assert sorted(load.unexpected) == ["output.bias", "output.weight"]
    assert sorted(load.mismatched) == ["hidden.bias", "hidden.weight"]
    assert load.mismatched_shapes["hidden.weight"] == ShapeMismatch(checkpoint=[256, 20], model=[128, 20])
    assert load.tensors == 0


@pytest.mark.slow
def test_partial_load_fails_unless_asked_for_and_then_says_so(files: dict, capsys: pytest.CaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the keys fit: the run fails naming what did not load; --allow-missing runs it, every line saying
    so; --strict fails on the unexpected keys too."""
    args = ["run", files["sd.pt"], "--model", f"{MODULE}:Other", "--input-shape", "2,20", "--runs", "1"]
    monkeypatch.chdir(files["folder"])  # `ckv_test_models` is found in the caller's folder, by that name only
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("ckptview: 2 weights of the model not loaded from the file") and err.count("\n") == 1
    assert "head.weight, head.bias" in err and "--allow-missing" in err and "unexpected" not in err
    status = cli.main([*args, "--allow-missing"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert ("ckptview: warning: 2 missing keys (in the model, not in the checkpoint; left at their initial "
            "values): head.weight, head.bias") in captured.err
    assert "ckptview: warning: 2 unexpected keys (in the checkpoint, not in the model; not loaded): " \
           "output.weight, output.bias" in captured.err
    assert "2 tensors" in captured.out
    assert all(line.endswith("[partial load: 2 weights not from the file]") for line in captured.out.splitlines())
    assert cli.main([*args, "--allow-missing", "--strict"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ckptview: strict load: 2 missing keys") and err.count("\n") == 1


def test_full_pickle_refused_without_trust_and_run_with_trust(files: dict) -> None:
    marker = os.path.join(files["folder"], "unpickled.marker")
    request = RunRequest(files["full.pt"], runs=1, cwd=files["folder"])
    with pytest.raises(RunError, match="refusing to run a full-model pickle nobody trusted") as err:
        run(request)
    assert err.value.kind == "refused" and f"{MODULE}.Marked" in str(err.value)
    assert hints_of(err.value) == (Hint(Fix.TRUST),) and "pass --trust" in cli_words(err.value)
    assert not os.path.exists(marker), "something from the file ran without trust"
    request.trust = True
    result = run(request)
    assert os.path.exists(marker)  # the trusted worker really unpickled it
    assert result.source == PICKLE and result.inputs[0].origin == "guessed from the first layer"
    assert_stats_match(result.outputs[0], reference(files["mlp"], [InputSpec(shape=(2, 20))]))
    os.unlink(marker)


@pytest.mark.slow
def test_exception_in_user_forward_is_one_line(files: dict) -> None:
    with pytest.raises(RunError) as err:
        run(RunRequest(files["sd.pt"], model=f"{files['code']}:Bad", inputs=parse_input_specs("2,20")))
    assert err.value.kind == "exception"
    assert str(err.value) == "in the forward pass: ValueError: boom in user code"
    assert err.value.traceback is not None and "raise ValueError" in err.value.traceback
    assert err.value.load is not None and err.value.load.tensors == 4  # the load report survives the failure
    assert [i.spec for i in err.value.result.inputs or []] == ["2,20@float32=normal"]


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_hang_past_timeout_is_killed(files: dict, monkeypatch) -> None:
    """The worker and what it started are gone after the timeout, whichever phase the timeout hits: on a
    busy machine `import torch` alone can outlast it (the message then says start-up), so neither the phase
    nor the time it takes is asserted."""
    from ckptview.core.run import process as run_process

    pid_file = os.path.join(files["folder"], "worker.pid")
    workers: list[int] = []

    class Recorded(run_process.WorkerJob):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            workers.append(self.proc.pid)

    monkeypatch.setattr(run_process, "WorkerJob", Recorded)
    with pytest.raises(RunError, match=r"^timed out after 6 s during .+; the worker was stopped$") as err:
        run(RunRequest(files["sd.pt"], model=f"{MODULE}:Bad", model_kwargs={"mode": "hang"},
                       inputs=parse_input_specs("2,20"), timeout=6, cwd=files["folder"]))
    assert err.value.kind == "timeout"
    assert len(workers) == 1 and _pid_gone(workers[0])
    if os.path.exists(pid_file):  # it reached the forward pass: the process that hangs there is the worker
        with open(pid_file) as fh:
            assert int(fh.read()) == workers[0]
        os.unlink(pid_file)


@pytest.mark.slow
def test_cancel_kills_the_worker(files: dict) -> None:
    pid_file = os.path.join(files["folder"], "worker.pid")
    token = CancelToken()
    ended = threading.Event()

    def cancel_when_running() -> None:
        while not os.path.exists(pid_file) and not ended.is_set():  # in the forward pass (a hang: pytest-timeout)
            time.sleep(0.05)
        token.cancel()

    threading.Thread(target=cancel_when_running, daemon=True).start()
    try:
        with pytest.raises(RunError, match="cancelled during the forward pass") as err:
            run(RunRequest(files["sd.pt"], model=f"{MODULE}:Bad", model_kwargs={"mode": "hang"},
                           inputs=parse_input_specs("2,20"), cwd=files["folder"]), token=token)
    finally:
        ended.set()
    assert err.value.kind == "cancelled"
    with open(pid_file) as fh:
        assert _pid_gone(int(fh.read()))
    os.unlink(pid_file)


@pytest.mark.slow
def test_segfault_in_user_code_is_reported(files: dict) -> None:
    with pytest.raises(RunError) as err:
        run(RunRequest(files["sd.pt"], model=f"{MODULE}:Bad", model_kwargs={"mode": "segfault"},
                       inputs=parse_input_specs("2,20"), cwd=files["folder"]))
    assert err.value.kind == "crash"
    assert str(err.value).startswith("the worker process was killed by SIGSEGV (segmentation fault) "
                                      "during the forward pass")
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------ in-process tests


def test_classify_sources_and_trust(files: dict) -> None:
    assert classify_source(files["ts.pt"]).kind == TORCHSCRIPT
    assert classify_source(files["m.pt2"]).kind == EXPORT
    assert classify_source(files["sd.pt"]).kind == STATE_DICT
    pickled = classify_source(files["full.pt"])
    assert pickled.kind == PICKLE and f"{MODULE}.Marked" in pickled.unsafe_globals
    # with model code, a full pickle's weights are read safely as a state dict
    assert classify_source(files["full.pt"], model="x:y").kind == STATE_DICT
    with pytest.raises(RunError, match="state dict .*; give model code you trust"):
        check_trust(classify_source(files["sd.pt"]), trust=False, has_model=False)
    check_trust(pickled, trust=True, has_model=False)
    for graph in ("ts.pt", "m.pt2"):  # a graph's program runs when it loads: consent, always
        with pytest.raises(RunError, match="nobody trusted: loading it runs code from the file") as refused:
            check_trust(classify_source(files[graph]), trust=False, has_model=False)
        assert refused.value.kind == "refused"


def test_worker_itself_refuses_untrusted_pickle(files: dict) -> None:
    """Even if the parent's check were bypassed, the worker does not unpickle without trust."""
    job = Job({"source": PICKLE, "trust": False}, emit=lambda event: None)
    with pytest.raises(WorkerError, match="refusing"):
        load_model(job, files["full.pt"], "cpu")
    assert not os.path.exists(os.path.join(files["folder"], "unpickled.marker"))


def test_find_state_dict_nested_and_pickled_module(files: dict) -> None:
    ckpt = open_checkpoint(files["train.pt"])
    key, tensors = find_state_dict(ckpt)
    assert key == "model_state_dict"
    assert sorted(tensors) == ["module.hidden.bias", "module.hidden.weight", "module.output.bias",
                               "module.output.weight"]
    ckpt.close()
    ckpt = open_checkpoint(files["full.pt"])
    key, tensors = find_state_dict(ckpt)
    assert sorted(tensors) == sorted(files["mlp"].state_dict())
    ckpt.close()


def test_strip_prefixes() -> None:
    model = ["hidden.weight", "output.weight"]
    mapping, stripped = strip_prefixes(["module._orig_mod.hidden.weight", "module._orig_mod.output.weight"],
                                       model)
    assert stripped == ["module.", "_orig_mod."]
    assert set(mapping.values()) == set(model)
    # a model whose own keys start with `model.` keeps them
    mapping, stripped = strip_prefixes(["model.hidden.weight"], ["model.hidden.weight"])
    assert stripped == [] and mapping == {"model.hidden.weight": "model.hidden.weight"}


def test_suggest_inputs_from_first_linear(files: dict) -> None:
    assert suggest_inputs(files["sd.pt"]) == [InputSpec(shape=(2, 20))]
    assert suggest_inputs(files["train.pt"]) == [InputSpec(shape=(2, 20))]


def test_place_tensor_reports_what_cannot_be_placed(files: dict) -> None:
    ckpt = open_checkpoint(files["sd.pt"])
    info = ckpt.tensor("hidden.weight")
    tensor, reason = place_tensor(info, "cpu")
    assert reason == "" and torch.equal(tensor, files["mlp"].hidden.weight.detach())
    tensor, reason = place_tensor(info, "meta")
    assert tensor.is_meta and tuple(tensor.shape) == (256, 20)
    info.broken = "storage 'data/0' missing"
    tensor, reason = place_tensor(info, "cpu")
    assert tensor is None and reason.startswith("float32 on cpu: cannot read values")
    ckpt.close()


def test_numpy_to_torch_keeps_bfloat16_bits() -> None:
    values = torch.randn(5).to(torch.bfloat16)
    import ml_dtypes

    array = values.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    assert torch.equal(numpy_to_torch(array, "bfloat16"), values)


def test_flatten_and_describe_nested_outputs() -> None:
    out = {"logits": torch.tensor([[1.0, float("nan")], [float("inf"), 3.0]]), "aux": (torch.arange(3), 7)}
    tensors, others = describe_outputs(out, first_n=3)
    assert [t.name for t in tensors] == ["logits", "aux.0"]
    stats = tensors[0].stats
    assert stats is not None and stats.nan == 1 and stats.inf == 1 and stats.mean == pytest.approx(2.0)
    assert tensors[0].first == [1.0, "nan", "inf"]
    assert tensors[1].stats is not None and tensors[1].stats.max == 2.0 and tensors[1].dtype == "int64"
    assert others == [OtherOutput(name="aux.1", type="int", repr="7")]


def test_out_of_memory_is_its_own_kind() -> None:
    class OutOfMemoryError(RuntimeError):
        pass

    assert error_kind(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")) == "oom"
    assert error_kind(RuntimeError("MPS backend out of memory")) == "oom"
    assert error_kind(ValueError("boom")) == "exception"


def test_death_message() -> None:
    msg = _death_message(-9, "loading", ["noise", "Fatal Python error: Aborted", "  File x"])
    assert msg == "the worker process was killed by SIGKILL during loading (last output: noise)"
    assert _death_message(3, "forward pass", []) == "the worker process exited with status 3 during the forward pass"


def test_input_spec_syntax() -> None:
    a, b = parse_input_specs("2,3,224,224;2@int64=randint:0:10")
    assert a == InputSpec(shape=(2, 3, 224, 224))
    assert b == InputSpec(shape=(2,), dtype="int64", fill="randint", low=0, high=10)
    assert parse_input_specs("scalar@half=ones")[0] == InputSpec(shape=(), dtype="float16", fill="ones")
    assert parse_input_specs("4=randint:5:9")[0].dtype == "int64"  # integer fills default to int64
    assert parse_input_specs("4", dtype="bfloat16", fill="zeros")[0].text() == "4@bfloat16=zeros"
    for bad, words in [("2,x", "'x' is not a size"), ("2@float99", "unknown dtype"), ("2=randint:3:3", "empty"),
                       ("2;;3", "input 2 is empty"), ("2=gauss", "unknown fill"), ("", "empty input spec")]:
        with pytest.raises(InputSpecError, match=words):
            parse_input_specs(bad)


def test_input_values_are_seeded_and_filled() -> None:
    spec = InputSpec(shape=(1000,), dtype="int64", fill="randint", low=0, high=10)
    values = make_array(spec, seed=1)
    assert values.dtype == np.int64 and values.min() == 0 and values.max() == 9
    assert np.array_equal(values, make_array(spec, seed=1)) and not np.array_equal(values, make_array(spec, 2))
    normal = make_array(InputSpec(shape=(4000,)), seed=0, index=1)
    assert abs(normal.mean()) < 0.1 and abs(normal.std() - 1) < 0.1
    assert not np.array_equal(normal, make_array(InputSpec(shape=(4000,)), seed=0, index=0))
    bf16 = to_torch(make_array(InputSpec(shape=(3,), dtype="bfloat16", fill="full", low=1.5)), "bfloat16", "cpu")
    assert bf16.dtype == torch.bfloat16 and bf16.tolist() == [1.5, 1.5, 1.5]
    assert make_array(InputSpec(shape=(2, 2), fill="uniform", low=5, high=6)).min() >= 5
    meta = to_torch(make_array(InputSpec(shape=(2, 3))), "float16", "meta")
    assert meta.is_meta and meta.dtype == torch.float16


def test_input_files(tmp_path) -> None:
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    np.savez(tmp_path / "xs.npz", first=np.ones(2), second=np.zeros((1, 4), dtype=np.int32))
    assert [(n, a.shape) for n, a in load_input_file(str(tmp_path / "x.npy"))] == [("x", (2, 3))]
    assert [(n, a.dtype) for n, a in load_input_file(str(tmp_path / "xs.npz"))] == [
        ("first", np.float64), ("second", np.int32)]
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputSpecError, match="cannot read input file"):
        load_input_file(str(tmp_path / "obj.npy"))


def test_cli_errors_are_one_line(files: dict, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["run", files["sd.pt"], "--input-shape", "2,x"]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input-shape" in err and "'x' is not a size" in err
    assert cli.main(["run", files["sd.pt"], "--device", "tpu"]) != 0
    assert "unknown device 'tpu'" in capsys.readouterr().err
    assert cli.main(["run", files["full.pt"]]) != 0
    err = capsys.readouterr().err
    assert "refusing to run a full-model pickle nobody trusted" in err and "pass --trust to allow" in err


# ------------------------------------------------------------------------------------------ accelerators


def _real_run_on(device: str, files: dict) -> None:
    result = run(RunRequest(files["sd.pt"], device=device, model=f"{files['code']}:MLP",
                            inputs=parse_input_specs("8,20"), runs=5))
    assert result.device == device and result.outputs[0].device.startswith(device.split(":")[0])
    expected = reference(files["mlp"], [InputSpec(shape=(8, 20))])
    stats = result.outputs[0].stats
    assert stats is not None and stats.mean == pytest.approx(float(expected.double().mean()), abs=1e-3)
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes > 0


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA: " + ("this torch build has no CUDA" if not torch.backends.cuda.is_built()
                                         else "no CUDA device"))
def test_run_on_cuda(files: dict) -> None:
    _real_run_on("cuda:0", files)


@pytest.mark.skipif(not torch.backends.mps.is_available(), reason="no MPS device (Apple silicon only)")
def test_run_on_mps(files: dict) -> None:
    _real_run_on("mps", files)


def test_run_on_xla(files: dict) -> None:
    pytest.importorskip("torch_xla", reason="torch_xla is not installed")
    _real_run_on("xla:0", files)


@pytest.mark.slow
def test_an_input_file_goes_in_as_the_forward_takes_it(files: dict, tmp_path) -> None:
    """A `.npy` is one positional input whatever the file is called; an `.npz`'s arrays go by name only where
    the names are the forward's parameters, else in file order (`batch.npy` once became `forward(batch=...)`)."""
    x = np.linspace(-1, 1, 60, dtype=np.float32).reshape(3, 20)
    np.save(tmp_path / "batch.npy", x)
    np.savez(tmp_path / "named.npz", batch=x)  # not a parameter of forward(x): positional
    np.savez(tmp_path / "byname.npz", x=x)  # forward's own name: by keyword
    with torch.no_grad():
        expected = files["mlp"](torch.from_numpy(x))
    for name in ("batch.npy", "named.npz", "byname.npz"):
        result = run(RunRequest(files["sd.pt"], model=f"{files['code']}:MLP", input_file=str(tmp_path / name),
                                runs=1))
        (report,) = result.inputs
        assert report.origin == "file" and report.shape == [3, 20], name
        assert_stats_match(result.outputs[0], expected)


LIT_CODE = textwrap.dedent('''
    import torch
    import lightning as L

    class LitMLP(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.hidden = torch.nn.Linear(20, 16)
            self.output = torch.nn.Linear(16, 10)

        def forward(self, x):
            return self.output(torch.relu(self.hidden(x)))
''')


@pytest.fixture(scope="module")
def sources(files: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same input file's model kinds: a quantized state dict, a DCP folder, a Lightning checkpoint, a
    transformers model from its factory; each with the inputs it takes, named after data, not parameters."""
    folder = tmp_path_factory.mktemp("sources")
    models = files["models"]
    x = np.linspace(-1, 1, 60, dtype=np.float32).reshape(3, 20)
    np.save(folder / "batch.npy", x)
    np.savez(folder / "pair.npz", x=x, z=np.full((3, 10), 2.0, dtype=np.float32))  # z: no parameter's name
    np.savez(folder / "reversed.npz", y=np.full((3, 10), 3.0, dtype=np.float32), x=x)  # both named, reversed
    ids = np.arange(8, dtype=np.int64).reshape(1, 8) % 40
    np.save(folder / "tokens.npy", ids)
    np.savez(folder / "ids.npz", input_ids=ids)
    torch.manual_seed(2)
    torch.save(models.Pair().state_dict(), folder / "pair.pt")
    with warnings.catch_warnings():  # torch 2.13 deprecates quantized tensors; such files are still run
        warnings.filterwarnings("ignore", message=".*quantiz")
        quantized = models.quantized()
        torch.save(quantized.state_dict(), folder / "quantized.pt")
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore")
        dcp.save(files["mlp"].state_dict(), checkpoint_id=str(folder / "dcp"))
    gpt2 = models.gpt2_from_config()
    torch.save(gpt2.state_dict(), folder / "gpt2.pt")
    out = {"folder": folder, "x": x, "ids": ids, "quantized": quantized, "gpt2": gpt2.eval()}
    if importlib.util.find_spec("lightning") is not None:
        import lightning as L

        (folder / "ckv_lit_models.py").write_text(LIT_CODE)
        spec = importlib.util.spec_from_file_location("ckv_lit_models", folder / "ckv_lit_models.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        lit = module.LitMLP().eval()
        trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu", devices=1)
        trainer.strategy.connect(lit)
        trainer.save_checkpoint(str(folder / "lit.ckpt"))
        out["lit"] = lit
    return out


def _variation(files: dict, sources: dict, name: str) -> tuple[RunRequest, torch.Tensor]:
    """(request, expected output) of one way a model meets an input file."""
    folder, code, x = sources["folder"], files["code"], torch.from_numpy(sources["x"])
    mlp = files["mlp"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantiz")
        if name == "pair, a name that is no parameter":
            pair = files["models"].Pair()
            pair.load_state_dict(torch.load(folder / "pair.pt"))
            return (RunRequest(str(folder / "pair.pt"), model=f"{code}:Pair", input_file=str(folder / "pair.npz")),
                    pair(x, torch.full((3, 10), 2.0)))
        if name == "pair, names in another order":
            pair = files["models"].Pair()
            pair.load_state_dict(torch.load(folder / "pair.pt"))
            return (RunRequest(str(folder / "pair.pt"), model=f"{code}:Pair",
                               input_file=str(folder / "reversed.npz")), pair(x, torch.full((3, 10), 3.0)))
        if name == "torchscript":
            return RunRequest(files["ts.pt"], trust=True, input_file=str(folder / "batch.npy")), mlp(x)
        if name == "state dict, --model, --compare":
            return (RunRequest(files["sd.pt"], model=f"{code}:MLP", input_file=str(folder / "batch.npy"),
                               compare_path=files["train.pt"]), mlp(x))
        if name == "dcp":
            return RunRequest(str(folder / "dcp"), model=f"{code}:MLP", input_file=str(folder / "batch.npy")), mlp(x)
        if name == "dynamically quantized":
            return (RunRequest(str(folder / "quantized.pt"), model=f"{code}:quantized",
                               input_file=str(folder / "batch.npy")), sources["quantized"](x))
        if name == "full pickle, trusted":
            return (RunRequest(files["full.pt"], trust=True, cwd=files["folder"], input_file=str(folder / "batch.npy")),
                    mlp(x))
        if name == "from_config factory, .npy":
            ids = torch.from_numpy(sources["ids"])
            return (RunRequest(str(folder / "gpt2.pt"), model=f"{code}:gpt2_from_config",
                               input_file=str(folder / "tokens.npy")), sources["gpt2"](ids).logits)
        if name == "from_config factory, .npz by name":
            ids = torch.from_numpy(sources["ids"])
            return (RunRequest(str(folder / "gpt2.pt"), model=f"{code}:gpt2_from_config",
                               input_file=str(folder / "ids.npz")), sources["gpt2"](input_ids=ids).logits)
        if name == "lightning":
            if "lit" not in sources:
                pytest.skip("lightning is not installed")
            return (RunRequest(str(folder / "lit.ckpt"), model=f"{folder / 'ckv_lit_models.py'}:LitMLP",
                               input_file=str(folder / "batch.npy")), sources["lit"](x))
    raise AssertionError(name)


VARIATIONS = ["pair, a name that is no parameter", "pair, names in another order", "torchscript",
              "state dict, --model, --compare", "dcp", "dynamically quantized", "full pickle, trusted",
              "from_config factory, .npy", "from_config factory, .npz by name", "lightning"]


@pytest.mark.parametrize("name", VARIATIONS)
def test_an_input_file_meets_every_kind_of_model(files: dict, sources: dict, name: str) -> None:
    """The `.npy` regression broke 11 of 23 run cases of every source kind: each runs with a file input, by
    position unless every name is a parameter of the forward, and gives the model's own output."""
    from tests.support.run_here import worker_here

    request, expected = _variation(files, sources, name)
    request.runs, request.warmup = 1, 0
    with worker_here() as seen, warnings.catch_warnings():
        # What torch 2.13 says while loading files it still loads (the worker's warnings are its own).
        for deprecated in (".*quantiz", "TypedStorage is deprecated", "`torch.jit.load` is deprecated"):
            warnings.filterwarnings("ignore", message=deprecated)
        result = run(request)
    assert all(i.origin == "file" for i in result.inputs)
    (ours,) = [t for n, t in seen.last.items() if n in ("output", "logits")]
    assert torch.equal(ours, expected), name
    if result.compare is not None:
        assert result.compare.load.missing == [] and result.compare.load.stripped_prefixes == ["module."]
