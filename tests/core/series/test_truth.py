"""`ckptview series` on the issue's run folder: unsafe globals shown, a checkpoint that changes or fails reported
while the rest is read, counters never explosions, unreadable files named, NaN/Inf counted per value, optimizer
state named by parameter (issues 24.14, 24.15, 25.3)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from ckptview.cli import main
from ckptview.core.series import timeline as series_mod
from ckptview.core.series.timeline import run_series
from tests.core.series.test_timeline import flat, torch_figures
from tests.support.series_run import CNN, GROW_AT, STEPS, make_run


class Exec:
    """Pickles as ``exec(code)``: what a hostile checkpoint carries (torch.save writes it, never runs it)."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self) -> tuple:
        return exec, (self.code,)


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("issue_run") / "run"
    make_run(folder)
    return folder


def copy_run(run_folder, tmp_path):
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(run_folder, dst)
    return [str(dst / f"step_{s}.pt") for s in STEPS]


# ---------------------------------------------------------------------------------------------------
# 24.14: unsafe globals per checkpoint


@pytest.mark.slow
def test_unsafe_global_is_shown_per_checkpoint_in_text_json_and_findings(run_folder, tmp_path, capsys):
    paths = copy_run(run_folder, tmp_path)
    marker = tmp_path / "ran"
    state = torch.load(paths[2], weights_only=True)
    state["hook"] = Exec(f"open({str(marker)!r}, 'w').close()")
    torch.save(state, paths[2])
    assert not marker.exists()

    assert main(["series", str(tmp_path / "run"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["unsafe_globals"] for c in data["checkpoints"]] == [[], [], ["builtins.exec"], [], [], []]
    unsafe = [f for f in data["findings"] if f["kind"] == "unsafe"]
    assert len(unsafe) == 1 and unsafe[0]["checkpoint"] == paths[2] and unsafe[0]["tensor"] is None
    assert "builtins.exec" in unsafe[0]["detail"] and unsafe[0]["step"] == STEPS[2]

    assert main(["series", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.endswith("step_20.pt"))  # its row in the table
    assert lines[at + 1].split() == ["UNSAFE", "GLOBALS", "(referenced,", "not", "run):", "builtins.exec"]
    assert sum("UNSAFE" in line for line in lines) == 1
    assert any("unsafe" in line and "builtins.exec" in line and "step 20" in line for line in lines)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------------
# 24.15: a checkpoint that changes or fails while the series reads it


def _resave_after_open(monkeypatch, victim: str, when_opening: str, new_state) -> None:
    """Re-save ``victim`` in place (as torch.save over the same path does) right after the series opens
    ``when_opening`` for reading its values (the second open; the first is planning)."""
    real_open = series_mod.open_checkpoint
    opened: dict[str, int] = {}

    def opening(path, *args):
        ckpt = real_open(path, *args)
        opened[path] = opened.get(path, 0) + 1
        if path == when_opening and opened[path] == 2:
            with open(victim, "r+b") as fh:
                fh.truncate(0)
            torch.save(new_state, victim)
        return ckpt

    monkeypatch.setattr(series_mod, "open_checkpoint", opening)


def test_checkpoint_resaved_while_read_is_reported_and_the_rest_shown(run_folder, tmp_path, monkeypatch, capsys):
    paths = copy_run(run_folder, tmp_path)
    _resave_after_open(monkeypatch, paths[3], paths[3], {"step": 30, "w": torch.ones(3)})
    assert main(["series", str(tmp_path / "run"), "--json"]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert len(data["checkpoints"]) == 6
    assert "changed on disk" in data["checkpoints"][3]["error"]
    bad = [f for f in data["findings"] if f["kind"] == "unreadable"]
    assert [(f["checkpoint"], f["tensor"]) for f in bad] == [(paths[3], None)]
    assert captured.err.count("\n") == 1 and "step_30.pt" in captured.err and "changed" in captured.err
    weight = next(t for t in data["tensors"] if t["name"] == "model.conv1.weight")
    assert weight["norm"][3] is None and None not in weight["norm"][:3] and weight["norm"][4] is not None
    counter = next(t for t in data["tensors"] if t["name"] == "model.bn1.num_batches_tracked")  # never NaN
    assert counter["update_ratio"][4] is None and counter["update_ratio"][5] is not None  # no ratio across the hole


def test_checkpoint_resaved_after_it_was_read_does_not_abort(run_folder, tmp_path, monkeypatch, capsys):
    # Re-saved while it serves as the previous side of the next checkpoint (the read-ahead's last check
    # used to abort the whole series with no output at all).
    paths = copy_run(run_folder, tmp_path)
    _resave_after_open(monkeypatch, paths[1], paths[2], {"step": 12, "w": torch.ones(3)})
    assert main(["series", str(tmp_path / "run")]) == 2
    captured = capsys.readouterr()
    assert "6 checkpoints" in captured.out and "model.fc.weight" in captured.out
    assert "step_12.pt" in captured.err and "changed on disk" in captured.err
    assert captured.err.count("\n") == 1


def test_checkpoint_failing_to_open_while_read_is_reported(run_folder, tmp_path, monkeypatch, capsys):
    paths = copy_run(run_folder, tmp_path)
    real_open = series_mod.open_checkpoint
    seen: list[str] = []

    def failing(path, *args):
        seen.append(path)
        if path == paths[4] and seen.count(path) == 2:
            raise RuntimeError("reader tripped")
        return real_open(path, *args)

    monkeypatch.setattr(series_mod, "open_checkpoint", failing)
    assert main(["series", str(tmp_path / "run"), "--json"]) == 2
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert "reader tripped" in data["checkpoints"][4]["error"]
    assert "step_40.pt" in captured.err and "Traceback" not in captured.err
    assert data["tensors"][0]["norm"][5] is not None


# ---------------------------------------------------------------------------------------------------
# 25.3: findings


def test_step_counters_are_never_explosions(run_folder):
    result = run_series([str(run_folder)])
    explosions = [(f.tensor, f.index) for f in result.findings if f.kind == "explosion"]
    assert explosions, "the run has real explosions (bn2.running_mean at step 30)"
    for name, _ in explosions:
        assert not name.endswith(("num_batches_tracked", ".step")), name
        assert result.tensors[name].dtype in ("float32", "float64", "float16", "bfloat16")
    assert ("model.bn2.running_mean", 3) in explosions
    # Counters still have their figures; only the findings leave them out.
    assert result.tensors["model.bn1.num_batches_tracked"].figure("norm") == [float(s) for s in STEPS]


def test_unreadable_file_is_named_with_its_reason(run_folder, tmp_path, capsys):
    paths = copy_run(run_folder, tmp_path)
    broken = tmp_path / "run" / "broken.pt"
    broken.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    assert main(["series", *paths, str(broken)]) == 2
    out = capsys.readouterr().out
    findings = out[out.index(" findings\n"):].splitlines()
    line = next(line for line in findings if " unreadable " in line)
    assert "broken.pt" in line and "None" not in line and "(checkpoint)" not in line
    assert "zip" in line.lower() or "not a checkpoint" in line.lower()


def test_nan_inf_column_counts_values_of_the_last_checkpoint(run_folder, capsys):
    assert main(["series", str(run_folder)]) == 2 - 2  # nothing unreadable
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("tensor"))
    assert "nan/inf" in header
    last = flat(torch.load(os.path.join(run_folder, f"step_{STEPS[-1]}.pt"), weights_only=True))
    for name in ("model.fc.weight", "model.conv1.weight", "model.bn1.num_batches_tracked"):
        row = next(line for line in out.splitlines() if line.startswith(name + " "))
        figures = torch_figures(last[name]) if last[name].is_floating_point() else {"nan": 0, "inf": 0}
        expected = f"{figures['nan']}/{figures['inf']}" if figures["nan"] or figures["inf"] else "-"
        assert row.split()[-1] == expected, row
        if figures["nan"] == last[name].numel():  # nothing finite: no norm, rather than a zero norm
            assert "no finite" in row and " 0 " not in row, row


def _param_names(step: int) -> list[str]:
    return [name for name, _ in CNN(grown=step >= GROW_AT).named_parameters()]


def test_optimizer_state_is_named_by_parameter_and_followed_across_rebuilds(run_folder):
    result = run_series([str(run_folder)])
    names = list(result.tensors)
    assert not any(n.startswith("optimizer.state.") and n.split(".")[2].isdigit() for n in names), names
    assert "optimizer.state.fc.weight.exp_avg" in names and "optimizer.state.conv2.weight.exp_avg" in names
    # Against torch: each parameter's state, found by its position in that checkpoint's param list.
    for t, step in enumerate(STEPS):
        saved = torch.load(os.path.join(run_folder, f"step_{step}.pt"), weights_only=True)
        ids = saved["optimizer"]["param_groups"][0]["params"]
        for index, pname in enumerate(_param_names(step)):
            state = saved["optimizer"]["state"][ids[index]]
            series = result.tensors[f"optimizer.state.{pname}.exp_avg"]
            assert series.figure("norm")[t] == pytest.approx(torch_figures(state["exp_avg"])["norm"], rel=1e-9)
            assert series.param == pname
    # The head's state keeps its shape: rebuilding the optimizer at step 20 is no shape change.
    assert not [f for f in result.findings if f.kind == "shape_changed"]
    appeared = {(f.tensor, f.index) for f in result.findings if f.kind == "appeared"}
    assert ("optimizer.state.conv2.weight.exp_avg", 2) in appeared
    data = result.to_json()
    row = next(t for t in data["tensors"] if t["name"] == "optimizer.state.fc.weight.exp_avg")
    assert row["param"] == "fc.weight"


def test_info_names_optimizer_state_by_parameter(run_folder, capsys):
    assert main(["info", os.path.join(run_folder, "step_50.pt")]) == 0
    out = capsys.readouterr().out
    saved = torch.load(os.path.join(run_folder, "step_50.pt"), weights_only=True)
    ids = saved["optimizer"]["param_groups"][0]["params"]
    for index, pname in enumerate(_param_names(50)):
        row = next(line for line in out.splitlines() if line.startswith(f"optimizer.state.{ids[index]}.exp_avg "))
        assert f"exp_avg of {pname}" in row, row


def test_a_tensor_whose_reading_fails_unexpectedly_is_its_error_only(run_folder, monkeypatch):
    from ckptview.core.read.values import reading as values

    real = values.iter_chunks

    def flaky(info, *args, **kwargs):
        if tuple(info.shape) == (4, 4, 3, 3) and info.dtype == "float32":
            raise IndexError("reader bug")
        return real(info, *args, **kwargs)

    from ckptview.core.series import executor, timeline

    monkeypatch.setattr(timeline, "iter_chunks", flaky)  # as the series reads values, in process
    monkeypatch.setattr(executor, "iter_chunks", flaky)
    result = run_series([str(run_folder)])
    bad = {(f.tensor, f.index) for f in result.findings if f.kind == "unreadable"}
    assert ("model.conv2.weight", 2) in bad and all(ref.error is None for ref in result.checkpoints)
    assert all("IndexError: reader bug" in f.detail for f in result.findings if f.kind == "unreadable")
    assert result.tensors["model.fc.weight"].figure("norm")[5] is not None
