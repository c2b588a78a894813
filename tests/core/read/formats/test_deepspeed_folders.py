"""DeepSpeed's output folders (`engine.save_checkpoint`), in the layout DeepSpeed writes (tests/support/deepspeed_run):
each `global_stepN/` opens as one checkpoint whose files read as torch reads them, the ZeRO optimizer's flat
partitions named by parameter; the folder above is a run."""

from __future__ import annotations

import json

import pytest
import torch

from ckptview.commands.info import info_dict
from ckptview.core.inspect.optimizer import find_optimizers
from ckptview.core.message import Fix, Hint, hints_of
from ckptview.core.read.folder_contents import run_folder_error
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from ckptview.core.series.discover import expand_folder, find_position
from tests.support.deepspeed_run import Net, write_run
from tests.support.torch_compare import get_path, same_values


def _torch_reads_the_same(ckpt, folder, files):
    """Every tensor of every file: the names torch.load finds, and bit for bit its values."""
    for name in files:
        loaded = torch.load(f"{folder}/{name}", weights_only=False)
        ours = [e for e in ckpt.tensors() if e.path[0] == name]
        theirs = []
        stack = [((), loaded)]
        while stack:
            path, obj = stack.pop()
            if isinstance(obj, torch.Tensor):
                theirs.append(path)
            elif isinstance(obj, dict):
                stack.extend(((*path, k), v) for k, v in obj.items())
            elif isinstance(obj, (list, tuple)):
                stack.extend(((*path, i), v) for i, v in enumerate(obj))
        assert sorted(map(str, (e.path[1:] for e in ours))) == sorted(map(str, theirs)), name
        for entry in ours:
            tensor = get_path(loaded, entry.path[1:])
            assert entry.info.dtype == str(tensor.dtype).removeprefix("torch.")
            assert same_values(read_values(entry.info), tensor), entry.name


def _check_named(optimizers, step, stage, world, ranks=None):
    """Each rank's optimizer names every parameter it holds, its state read as DeepSpeed put it (the whole
    parameter, or the rank's piece where it lies in it); together the ranks hold every element once."""
    for rank, opt in zip(ranks or range(world), optimizers, strict=True):
        assert opt.mapping == "exact", opt.note
        assert f"ZeRO stage {stage}" in opt.note and f"rank {rank} of {world}" in opt.note, opt.note
        assert opt.kind == "adam-like"
        for p in opt.params:
            whole = step.params[p.name]
            fp32, exp_avg = p.entry("fp32"), p.entry("exp_avg")
            values = {k: torch.from_numpy(read_values(p.entry(k).tensor).copy()) for k in ("fp32", "exp_avg")}
            if p.piece is None:  # the rank holds the whole parameter: in its own shape
                assert fp32.tensor.shape == tuple(whole.shape) == exp_avg.tensor.shape
                assert torch.equal(values["fp32"], whole), p.name
                assert torch.equal(values["exp_avg"], step.state[p.name]["exp_avg"]), p.name
            else:  # this rank's piece: found in the whole parameter where DeepSpeed put it
                assert world > 1 and fp32.tensor.shape == exp_avg.tensor.shape and len(fp32.tensor.shape) == 1
                start, count = p.piece
                assert count == values["fp32"].numel()
                flat = whole.reshape(-1)[start:start + values["fp32"].numel()]
                assert torch.equal(values["fp32"], flat), p.name
                flat = step.state[p.name]["exp_avg"].reshape(-1)[start:start + values["exp_avg"].numel()]
                assert torch.equal(values["exp_avg"], flat), p.name
    if ranks is not None:
        return
    assert {p.name for opt in optimizers for p in opt.params} == set(step.params)  # every parameter, by its name
    held = {}  # every element of every parameter is on exactly one rank
    for opt in optimizers:
        for p in opt.params:
            start, count = p.piece or (0, step.params[p.name].numel())
            held.setdefault(p.name, []).append((start, count))
    for name, pieces in held.items():
        covered = sorted(pieces)
        assert covered[0][0] == 0 and sum(c for _, c in covered) == step.params[name].numel(), name
        assert all(a + n == b for (a, n), (b, _) in zip(covered, covered[1:], strict=False)), name


@pytest.mark.parametrize(("stage", "world", "bf16"), [(2, 1, False), (1, 1, True), (2, 2, False), (3, 1, False),
                                                      (3, 2, True)])
def test_a_step_folder_opens_with_its_optimizer_named(tmp_path, monkeypatch, stage, world, bf16):
    steps = write_run(tmp_path / "out", monkeypatch, steps=(3,), stage=stage, world=world, bf16=bf16)
    (step,) = steps
    ckpt = open_checkpoint(step.folder)
    try:
        assert ckpt.format == "training-folder"
        assert sorted(c.key for c in ckpt.root.children) == sorted(step.files)
        _torch_reads_the_same(ckpt, step.folder, step.files)
        assert "deepspeed.runtime.zero.config.ZeroStageEnum" in ckpt.unsafe_globals  # named, never imported
        optimizers = find_optimizers(ckpt)
        assert len(optimizers) == world
        _check_named(optimizers, step, stage, world)
        named = {p.name for opt in optimizers for p in opt.params}
        for opt in optimizers:
            for p in opt.params:
                if p.param is not None:  # the module's tensor of the same name (ZeRO-3 keeps placeholders)
                    assert p.param.name.endswith(f".module.{p.name}")
        data = json.loads(json.dumps(info_dict(ckpt)))
        assert {p["name"] for o in data["optimizers"] for p in o["params"]} == named
        # as model.parameters() counts them: ZeRO-3's empty placeholders by the shapes DeepSpeed records
        assert data["parameters"] == sum(p.numel() for p in Net().parameters())
    finally:
        ckpt.close()


@pytest.mark.parametrize(("stage", "world"), [(2, 2), (3, 2), (3, 1)])
def test_an_optimizer_file_alone_is_named_by_the_model_states_beside(tmp_path, monkeypatch, stage, world):
    """A rank's ZeRO file opened by itself: the tag's model states file beside it (ZeRO-3: the same rank's)
    gives param_shapes, so it is named and its pieces placed as in the folder, that file read once."""
    from ckptview.core.inspect import optimizer as optimizer_module

    (step,) = write_run(tmp_path / "out", monkeypatch, steps=(3,), stage=stage, world=world)
    opened = []
    real = open_checkpoint
    monkeypatch.setattr(optimizer_module, "open_checkpoint", lambda path, *a, **k: opened.append(path) or real(path))
    for rank in range(world):
        name = f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
        ckpt = real(f"{step.folder}/{name}")
        try:
            for _ in range(2):  # the window's panels ask again: the model states file is read once
                (opt,) = find_optimizers(ckpt)
                _check_named([opt], step, stage, world, ranks=[rank])
            states = f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
            assert opened == [f"{step.folder}/{states}"], opened
            if stage == 3:
                assert f"param_shapes of {states}" in opt.note, opt.note
        finally:
            ckpt.close()
        opened.clear()


@pytest.mark.slow
def test_series_on_the_output_folder(tmp_path, monkeypatch, capsys):
    """`ckptview series OUT` on what engine.save_checkpoint wrote: the tags in step order, read from the files."""
    from ckptview.cli import main

    steps = write_run(tmp_path / "out", monkeypatch, steps=(10, 20, 30), stage=2, world=2)
    assert main(["series", str(tmp_path / "out"), "--json", "--no-cache"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(c["path"], c["step"]) for c in data["checkpoints"]] == [(s.folder, s.step) for s in steps]
    assert data["order"]["by"] == "step"
    module = torch.load(f"{steps[-1].folder}/mp_rank_00_model_states.pt", weights_only=False)["module"]
    assert {t["name"] for t in data["tensors"]} == {f"module.{k}" for k in module}

def test_the_output_folder_is_a_run(tmp_path, monkeypatch):
    steps = write_run(tmp_path / "out", monkeypatch, steps=(10, 20, 30))
    out = str(tmp_path / "out")
    assert expand_folder(out) == [s.folder for s in steps]
    for s in steps:
        ckpt = open_checkpoint(s.folder)
        try:
            position = find_position(ckpt, s.folder)
            assert position.step == s.step
            assert position.step_source == "file: mp_rank_00_model_states.pt.global_steps"
            assert run_folder_error(s.folder) is None  # one step: never a series of it
        finally:
            ckpt.close()
    error = run_folder_error(out)
    assert error is not None and "3 checkpoints" in str(error) and Hint(Fix.SERIES, (str(out),)) in hints_of(error)
    assert len(error.names) == 3  # what the window offers to open


def test_info_on_a_step_and_on_the_run(tmp_path, monkeypatch, capsys):
    from ckptview.cli import main

    (step,) = write_run(tmp_path / "out", monkeypatch, steps=(5,))
    assert main(["info", step.folder]) == 0
    text = capsys.readouterr().out
    assert "training-folder" in text and "series" not in text
    assert "mp_rank_00_model_states.pt.module.head.weight" in text
    assert "exp_avg of" not in text or "head.weight" in text
    assert main(["info", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert "holds 1" in err or "it holds one" in err, err
