"""ckptview.core.series.timeline and `ckptview series`: a run trained here, every figure checked against torch in float64."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

from ckptview.cli import main
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.jobs import CancelToken
from ckptview.core.series.discover import find_checkpoints
from ckptview.core.series.model import module_series
from ckptview.core.series.timeline import iter_series, plan_series, run_series

STEPS = 6


class Net(nn.Module):
    """A small model; ``extra`` adds a layer, ``wide`` changes the input width of the first one."""

    def __init__(self, extra: bool = False, wide: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(8 if wide else 6, 16)
        self.norm = nn.LayerNorm(16)
        self.extra = nn.Linear(16, 16) if extra else None
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.embed(x)))
        if self.extra is not None:
            h = torch.relu(self.extra(h))
        return self.head(h)


def train_run(folder, *, freeze: bool = False, nan_at: int | None = None, grow_at: int | None = None,
              explode_at: int | None = None, names=None, steps: int = STEPS, extra_state=None) -> list[str]:
    """Train a few Adam steps, saving a training checkpoint after each; returns the paths in step order."""
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    net = Net()
    if freeze:
        net.embed.requires_grad_(False)
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=0.05)
    opt_names = [n for n, p in net.named_parameters() if p.requires_grad]
    paths = []
    for step in range(1, steps + 1):
        if grow_at is not None and step == grow_at:
            old = net.state_dict()
            net = Net(extra=True, wide=True)
            net.load_state_dict({k: v for k, v in old.items() if not k.startswith("embed.")}, strict=False)
            opt = torch.optim.Adam(net.parameters(), lr=0.05)
            opt_names = [n for n, _ in net.named_parameters()]
        width = net.embed.in_features
        x = torch.randn(32, width, generator=gen)
        y = torch.randn(32, 3, generator=gen)
        loss = (net(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            if nan_at is not None and step == nan_at:
                net.head.weight[1, 2] = float("nan")
            if explode_at is not None and step == explode_at:
                net.norm.weight.mul_(50.0)
        ckpt = {"model": net.state_dict(), "optimizer": opt.state_dict(), "global_step": step,
                "epoch": (step - 1) // 2, "loss": float(loss.detach())}
        if extra_state is not None:
            ckpt.update(extra_state(step))
        name = names[step - 1] if names else f"step_{step}.pt"
        path = os.path.join(folder, name)
        torch.save(ckpt, path)
        PARAM_NAMES[str(path)] = opt_names
        paths.append(path)
    return paths


# path -> the names of the parameters its optimizer was built over, in order (what the optimizer's ids mean)
PARAM_NAMES: dict[str, list[str]] = {}


def load_run(path) -> dict:
    """name -> tensor of a checkpoint as the series names them: flat, optimizer state by parameter name."""
    saved = torch.load(path, weights_only=True)
    out = flat(saved)
    names = PARAM_NAMES.get(str(path))
    if names is None or "optimizer" not in saved:
        return out
    ids = [i for group in saved["optimizer"]["param_groups"] for i in group["params"]]
    by_id = {str(i): names[k] for k, i in enumerate(ids)}
    renamed = {}
    for key, value in out.items():
        parts = key.split(".")
        if parts[:2] == ["optimizer", "state"] and parts[2] in by_id:
            key = ".".join(["optimizer", "state", by_id[parts[2]], *parts[3:]])
        renamed[key] = value
    return renamed


def flat(obj, prefix=""):
    """name -> tensor, the contract's names (path components joined by '.')."""
    out = {}
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flat(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def torch_figures(t: torch.Tensor) -> dict:
    """norm, mean, std (sample), abs_max over the finite values, NaN and Inf counts; torch in float64."""
    x = t.detach().to(torch.float64).reshape(-1)
    fin = x[torch.isfinite(x)]
    return {
        "norm": float(torch.linalg.vector_norm(fin)),
        "mean": float(fin.mean()) if fin.numel() else None,
        "std": float(fin.std()) if fin.numel() > 1 else None,
        "abs_max": float(fin.abs().max()) if fin.numel() else None,
        "nan": int(torch.isnan(x).sum()),
        "inf": int(torch.isinf(x).sum()),
    }


def torch_update(a: torch.Tensor, b: torch.Tensor) -> tuple[float | None, float]:
    """(update ratio, fraction changed) from t-1 (a) to t (b), the documented rules, torch in float64."""
    a, b = a.detach().to(torch.float64).reshape(-1), b.detach().to(torch.float64).reshape(-1)
    both = torch.isfinite(a) & torch.isfinite(b)
    changed = int(((a != b) & ~(torch.isnan(a) & torch.isnan(b))).sum()) / a.numel()
    if not bool(both.any()):
        return None, changed
    num = float(torch.linalg.vector_norm(b[both] - a[both]))
    den = float(torch.linalg.vector_norm(a[torch.isfinite(a)]))
    if den == 0:
        return (0.0 if num == 0 else None), changed
    return num / den, changed


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12) if value is not None else None


def check_against_torch(result, paths: list[str]) -> None:
    """Every figure of every tensor and checkpoint equals torch's on the same files."""
    loaded = [load_run(p) for p in paths]
    assert [c.path for c in result.checkpoints] == paths
    names = set().union(*loaded)
    assert set(result.tensors) == names
    for name, series in result.tensors.items():
        for t, state in enumerate(loaded):
            if name not in state:
                assert series.shapes[t] is None and series.stats[t] is None
                assert all(series.figure(k)[t] is None for k in ("norm", "update_ratio", "frac_changed"))
                continue
            assert series.shapes[t] == tuple(state[name].shape)
            expected = torch_figures(state[name])
            for key, value in expected.items():
                assert series.figure(key)[t] == approx(value), (name, t, key)
            before = loaded[t - 1].get(name) if t else None
            if before is None or before.shape != state[name].shape:
                assert series.update_ratio[t] is None and series.frac_changed[t] is None, (name, t)
            else:
                ratio, changed = torch_update(before, state[name])
                assert series.update_ratio[t] == approx(ratio), (name, t)
                assert series.frac_changed[t] == approx(changed), (name, t)


def kinds(result, kind: str) -> list[tuple[str | None, int]]:
    return [(f.tensor, f.index) for f in result.findings if f.kind == kind]


# ---------------------------------------------------------------------------------------------------
# The three runs of the issue.


def test_frozen_layer_run_matches_torch_and_stalls(tmp_path):
    # Names that sort differently from the steps: the order must come from global_step inside the files.
    names = ["ckpt-e.pt", "ckpt-b.pt", "ckpt-f.pt", "ckpt-a.pt", "ckpt-d.pt", "ckpt-c.pt"]
    paths = train_run(tmp_path / "run", freeze=True, names=names)
    (tmp_path / "run" / "notes.txt").write_text("lr 0.05, frozen embedding\n")
    result = run_series([str(tmp_path / "run")])
    assert result.order_by == "step" and result.order_sources == ["file: global_step"]
    assert [c.position.step for c in result.checkpoints] == list(range(1, STEPS + 1))
    assert [c.position.epoch for c in result.checkpoints] == [(s - 1) // 2 for s in range(1, STEPS + 1)]
    check_against_torch(result, [str(p) for p in paths])
    assert kinds(result, "stalled") == [("model.embed.weight", 1), ("model.embed.bias", 1)]
    assert not kinds(result, "nan") and not kinds(result, "explosion") and not kinds(result, "appeared")
    stalled = next(f for f in result.findings if f.kind == "stalled")
    assert stalled.checkpoint == str(paths[1]) and "no change" in stalled.detail


def test_nan_injected_at_step_4_is_found_where_it_appears(tmp_path):
    paths = train_run(tmp_path / "run", nan_at=4)
    result = run_series([str(tmp_path / "run")])
    check_against_torch(result, paths)
    nan = kinds(result, "nan")
    assert nan[0] == ("model.head.weight", 3)
    assert result.checkpoints[3].position.step == 4
    # Every tensor's NaN finding is at its first checkpoint holding a NaN, by torch.
    loaded = [load_run(p) for p in paths]
    for name in result.tensors:
        first = next((t for t, s in enumerate(loaded) if name in s and bool(torch.isnan(s[name]).any())), None)
        assert ((name, first) in nan) == (first is not None), name
    assert sum(1 for f in nan if f[0] == "model.head.weight") == 1
    detail = next(f.detail for f in result.findings if f.kind == "nan" and f.tensor == "model.head.weight")
    assert "1 of 48" in detail
    # All-NaN tensors do not "stop changing": there is nothing finite to compare.
    assert not any(f.kind == "stalled" for f in result.findings)


def test_layer_added_appears_and_shapes_change(tmp_path):
    paths = train_run(tmp_path / "run", grow_at=4)
    result = run_series([str(tmp_path / "run")])
    check_against_torch(result, paths)
    appeared = kinds(result, "appeared")
    assert ("model.extra.weight", 3) in appeared and ("model.extra.bias", 3) in appeared
    assert ("model.embed.weight", 3) in kinds(result, "shape_changed")
    detail = next(f.detail for f in result.findings if f.kind == "shape_changed")
    assert detail == "shape [16, 6] -> [16, 8]"
    # The new layer sits beside its neighbours, not at the end.
    order = list(result.tensors)
    assert order.index("model.extra.weight") == order.index("model.norm.bias") + 1
    data = result.to_json()
    extra = next(t for t in data["tensors"] if t["name"] == "model.extra.weight")
    assert extra["norm"][:3] == [None, None, None] and extra["norm"][3] is not None
    assert extra["update_ratio"][:4] == [None] * 4 and extra["update_ratio"][4] is not None
    assert extra["shapes"][:3] == [None] * 3 and extra["shape"] == [16, 16]


def test_disappearing_tensor_and_explosion(tmp_path):
    paths = train_run(tmp_path / "run", explode_at=3,
                      extra_state=lambda step: {"ema": torch.ones(4) * step} if step < 5 else {})
    result = run_series([str(tmp_path / "run")])
    check_against_torch(result, paths)
    assert ("ema", 4) in kinds(result, "disappeared")
    explosions = kinds(result, "explosion")
    assert explosions[0] == ("model.norm.weight", 2)
    loaded = [load_run(p) for p in paths]
    norms = [{k: float(v.double().norm()) for k, v in s.items()} for s in loaded]
    learns = {name for s in loaded for name, v in s.items()  # step counters never explode (issue 25.3)
              if v.is_floating_point() and not (v.numel() == 1 and name.rsplit(".", 1)[-1] == "step")}
    expected = [(name, t) for t in range(1, len(paths)) for name in result.tensors if name in learns
                if name in norms[t] and norms[t - 1].get(name) and norms[t][name] > 10 * norms[t - 1][name]]
    assert sorted(explosions, key=lambda e: (e[1], e[0])) == sorted(expected, key=lambda e: (e[1], e[0]))
    finding = next(f for f in result.findings if f.kind == "explosion")
    assert "factor 10" in finding.detail
    strict = run_series([str(tmp_path / "run")], explode_factor=60.0)
    assert ("model.norm.weight", 2) not in kinds(strict, "explosion")  # x50


def test_stall_threshold_flags_tensors_that_barely_move(tmp_path):
    def tiny(step):
        return {"slow": torch.full((50,), 1.0) + 1e-6 * step, "fast": torch.full((50,), 1.0) * step}

    train_run(tmp_path / "run", extra_state=tiny)
    exact = run_series([str(tmp_path / "run")])
    assert "slow" not in [name for name, _ in kinds(exact, "stalled")]
    loose = run_series([str(tmp_path / "run")], stall_threshold=1e-4)
    assert ("slow", 1) in kinds(loose, "stalled") and "fast" not in [n for n, _ in kinds(loose, "stalled")]


# ---------------------------------------------------------------------------------------------------
# Ordering and discovery.


def test_order_from_lightning_names(tmp_path):
    folder = tmp_path / "lightning"
    folder.mkdir()
    steps = [(0, 5), (0, 10), (1, 50), (2, 100)]
    for epoch, step in reversed(steps):
        torch.save({"w": torch.full((3,), float(step))}, folder / f"epoch={epoch}-step={step}.ckpt")
    (folder / "last.txt").write_text("not a checkpoint")
    result = run_series([str(folder)])
    assert result.order_by == "step" and result.order_sources == ["name"]
    assert [(c.position.epoch, c.position.step) for c in result.checkpoints] == steps
    assert [c.position.step_source for c in result.checkpoints] == ["name"] * 4
    assert result.tensors["w"].figure("mean") == [5.0, 10.0, 50.0, 100.0]


def test_order_from_trainer_state_json(tmp_path):
    from safetensors.torch import save_file

    for step in (20, 3, 100):
        folder = tmp_path / "out" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        save_file({"w": torch.full((4,), float(step))}, str(folder / "model.safetensors"))
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": step / 10}))
        torch.save({"state": torch.zeros(2)}, folder / "optimizer.pt")
    result = run_series([str(tmp_path / "out")])
    assert [c.position.step for c in result.checkpoints] == [3, 20, 100]
    assert [c.position.epoch for c in result.checkpoints] == [0.3, 2, 10]
    assert result.order_sources == ["trainer_state.json"]
    assert list(result.tensors) == ["w"]  # the weights of each folder, not its optimizer file
    assert result.checkpoints[0].format == "training-folder"  # opened whole, the run follows its model file


def test_explicit_paths_and_globs_and_epoch_order(tmp_path):
    for i, epoch in enumerate((2, 0, 1)):
        torch.save({"epoch": epoch, "w": torch.full((2,), float(epoch))}, tmp_path / f"model_{i}.pt")
    result = run_series([str(tmp_path / "model_*.pt")])
    assert result.order_by == "epoch" and result.order_sources == ["file: epoch"]
    assert [c.position.epoch for c in result.checkpoints] == [0, 1, 2]
    result = run_series([str(tmp_path / "model_2.pt"), str(tmp_path / "model_0.pt")])
    assert [c.position.epoch for c in result.checkpoints] == [1, 2]


def test_order_by_numbers_in_names_when_nothing_else(tmp_path):
    for n in (10, 9, 100):
        torch.save({"w": torch.full((2,), float(n))}, tmp_path / f"snap{n}.pt")
    result = run_series([str(tmp_path)])
    assert result.order_by == "name"
    assert [os.path.basename(c.path) for c in result.checkpoints] == ["snap9.pt", "snap10.pt", "snap100.pt"]


def test_dcp_folders_as_a_run(tmp_path):
    import torch.distributed.checkpoint as dcp

    for step in (1, 2, 3):
        state = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4) * step}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(state, checkpoint_id=str(tmp_path / "run" / f"step_{step}"))
    result = run_series([str(tmp_path / "run")])
    assert [c.position.step for c in result.checkpoints] == [1, 2, 3]
    w = [torch.arange(12, dtype=torch.float64) * s for s in (1, 2, 3)]
    assert result.tensors["w"].figure("norm") == [approx(float(x.norm())) for x in w]
    assert result.tensors["w"].update_ratio[2] == approx(float((w[2] - w[1]).norm() / w[1].norm()))


def test_discovery_prefers_run_entries(tmp_path):
    train_run(tmp_path / "run", steps=3)
    torch.save({"w": torch.zeros(1)}, tmp_path / "run" / "best_model.pt")
    found = find_checkpoints([str(tmp_path / "run")])
    assert [os.path.basename(p) for p in found] == ["step_1.pt", "step_2.pt", "step_3.pt"]


# ---------------------------------------------------------------------------------------------------
# Streaming, dtypes, modules, cancel.


def test_chunking_layouts_and_dtypes_do_not_change_figures(tmp_path):
    gen = torch.Generator().manual_seed(3)
    paths = []
    for step in range(3):
        base = torch.randn(37, 23, generator=gen)
        state = {
            "dense": base.clone(),
            # One checkpoint saves a transposed view: chunk boundaries differ between the two sides.
            "strided": base.t() if step == 1 else base.t().contiguous(),
            "half": base.to(torch.bfloat16),
            "ints": torch.arange(50) * step,
            "flags": torch.arange(10) % (step + 2) == 0,
        }
        path = tmp_path / f"step_{step}.pt"
        torch.save(state, path)
        paths.append(str(path))
    result = run_series([str(tmp_path)], chunk_elems=7)
    check_against_torch(result, paths)
    whole = run_series([str(tmp_path)])
    for name in result.tensors:
        for key in ("norm", "mean", "std", "update_ratio", "frac_changed"):
            assert result.tensors[name].figure(key) == [approx(v) for v in whole.tensors[name].figure(key)]


def test_modules_aggregate_their_tensors_like_one_vector(tmp_path):
    paths = train_run(tmp_path / "run", steps=3)
    result = run_series([str(tmp_path / "run")])
    modules = {m.name: m for m in module_series(result)}
    loaded = [load_run(p) for p in paths]
    names = ["model.head.weight", "model.head.bias"]
    assert modules["model.head"].tensors == names
    vectors = [torch.cat([s[n].to(torch.float64).reshape(-1) for n in names]) for s in loaded]
    for t, v in enumerate(vectors):
        assert modules["model.head"].norm[t] == approx(float(v.norm()))
        assert modules["model.head"].std[t] == approx(float(v.std()))
        assert modules["model.head"].abs_max[t] == approx(float(v.abs().max()))
    for t in (1, 2):
        ratio, changed = torch_update(vectors[t - 1], vectors[t])
        assert modules["model.head"].update_ratio[t] == approx(ratio)
        assert modules["model.head"].frac_changed[t] == approx(changed)
    assert modules["model.head"].update_ratio[0] is None


def test_progress_reports_each_checkpoint_and_cancel_stops(tmp_path):
    train_run(tmp_path / "run", steps=4)
    result = plan_series([str(tmp_path / "run")])
    done = []
    gen = iter_series(result)
    for progress in gen:
        if progress.checkpoint >= 0:
            done.append(progress.checkpoint)
            assert result.done == progress.checkpoint + 1
            assert all(s.stats[progress.checkpoint] is not None for s in result.tensors.values())
    assert done == [0, 1, 2, 3]
    token = CancelToken()
    gen = iter_series(plan_series([str(tmp_path / "run")]), token=token)
    next(gen)
    token.cancel()
    with pytest.raises(Cancelled):
        for _ in gen:
            pass


# ---------------------------------------------------------------------------------------------------
# The command line.


def run_cli(*args: str) -> subprocess.CompletedProcess:
    code = ("import sys; from ckptview.cli import main; status = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'series imported torch'; sys.exit(status)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_cli_json_contract_without_torch(tmp_path):
    paths = train_run(tmp_path / "run", steps=4, nan_at=3)
    proc = run_cli("series", str(tmp_path / "run"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"checkpoints", "tensors", "findings"} <= set(data)
    assert data["checkpoints"][0]["path"] == paths[0]
    assert all({"path", "step", "epoch"} <= set(c) for c in data["checkpoints"])
    assert data["order"] == {"by": "step", "sources": ["file: global_step"]}
    keys = {"name", "shape", "dtype", "norm", "mean", "std", "abs_max", "nan", "inf", "update_ratio", "frac_changed"}
    for tensor in data["tensors"]:
        assert keys <= set(tensor)
        for key in keys - {"name", "shape", "dtype"}:
            assert len(tensor[key]) == 4
        assert tensor["update_ratio"][0] is None and tensor["frac_changed"][0] is None
    for finding in data["findings"]:
        assert {"kind", "tensor", "checkpoint", "detail"} <= set(finding)
    assert {"kind": "nan", "tensor": "model.head.weight", "checkpoint": paths[2]}.items() <= next(
        f for f in data["findings"] if f["kind"] == "nan").items()
    reference = run_series([str(tmp_path / "run")]).to_json()
    assert data == json.loads(json.dumps(reference))


def test_cli_table_escapes_names(tmp_path, capsys):
    for step in (1, 2):
        torch.save({"step": step, "evil\x1b[2Jname": torch.ones(3) * step}, tmp_path / f"s{step}.pt")
    assert main(["series", str(tmp_path), "--explode-factor", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[2Jname" in out
    assert "explosion" in out and "step 2" in out


def test_cli_hostile_or_missing_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    assert main(["series", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ckptview: ") and "Traceback" not in err
    assert main(["series", str(tmp_path / "nothing_*.pt")]) == 2
    assert "no file matches" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["series", str(empty)]) == 2
    assert "holds no checkpoint" in capsys.readouterr().err


def test_cli_truncated_checkpoint_in_a_run_is_reported_and_the_rest_read(tmp_path, capsys):
    paths = train_run(tmp_path / "run", steps=4)
    os.truncate(paths[2], 40)  # inside data.pkl: unreadable (a later cut is listed from its records, issue 45)
    assert main(["series", str(tmp_path / "run"), "--json"]) == 2
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert len(out["checkpoints"]) == 4 and "error" in out["checkpoints"][2]
    unreadable = [f for f in out["findings"] if f["kind"] == "unreadable"]
    assert unreadable and unreadable[0]["checkpoint"] == paths[2] and unreadable[0]["tensor"] is None
    assert captured.err.count("\n") == len(unreadable) and paths[2] in captured.err
    weight = next(t for t in out["tensors"] if t["name"] == "model.head.weight")
    assert weight["norm"][2] is None and weight["norm"][3] is not None
    # No ratio across the hole: step 4 is not compared with step 2.
    assert weight["update_ratio"][3] is None and weight["update_ratio"][1] is not None


def test_cli_rejects_bad_thresholds(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["series", str(tmp_path), "--explode-factor", "0.5"])
    with pytest.raises(SystemExit):
        main(["series", str(tmp_path), "--stall-threshold", "nan"])
    capsys.readouterr()


def test_all_checkpoints_unreadable_is_an_error(tmp_path):
    for i in range(2):
        (tmp_path / f"step_{i}.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointError, match="none of the 2 checkpoints"):
        plan_series([str(tmp_path)])


def test_update_ratio_from_an_all_zero_tensor(tmp_path):
    torch.save({"step": 1, "z": torch.zeros(4), "grows": torch.zeros(4)}, tmp_path / "a.pt")
    torch.save({"step": 2, "z": torch.zeros(4), "grows": torch.ones(4)}, tmp_path / "b.pt")
    result = run_series([str(tmp_path)])
    assert result.tensors["z"].update_ratio == [None, 0.0]
    assert result.tensors["grows"].update_ratio == [None, None]  # infinite: JSON null
    assert result.tensors["grows"].frac_changed == [None, 1.0]


def test_step_as_a_tensor_nested_state_and_empty_or_meta_tensors(tmp_path):
    for step in (30, 7, 12):
        torch.save({"state_dict": {"w": torch.full((3,), float(step)), "empty": torch.zeros(0),
                                   "meta": torch.empty(2, 2, device="meta")},
                    "trainer": {"global_step": torch.tensor(step)}}, tmp_path / f"save{step % 4}.ckpt")
    result = run_series([str(tmp_path)])
    assert [c.position.step for c in result.checkpoints] == [7, 12, 30]
    assert result.order_sources == ["file: trainer.global_step"]
    assert result.tensors["state_dict.empty"].update_ratio == [None, None, None]
    assert result.tensors["state_dict.meta"].shapes == [(2, 2)] * 3
    assert not [f for f in result.findings if f.kind in ("stalled", "unreadable")]
    assert main(["series", str(tmp_path), "--json"]) == 0


def test_safetensors_files_ordered_by_their_names(tmp_path):
    from safetensors.torch import save_file

    for step in (100, 20, 3):
        save_file({"w": torch.full((4,), float(step)), "frozen": torch.ones(2)},
                  str(tmp_path / f"model_step{step}.safetensors"))
    result = run_series([str(tmp_path)])
    assert [c.position.step for c in result.checkpoints] == [3, 20, 100]
    assert result.tensors["w"].update_ratio == [None, approx(17 / 3), approx(80 / 20)]
    assert kinds(result, "stalled") == [("frozen", 1)]


def test_a_fifo_among_the_paths_is_reported_not_opened(tmp_path, capsys):
    train_run(tmp_path / "run", steps=2)
    fifo = tmp_path / "step_9.pt"
    os.mkfifo(fifo)
    assert main(["series", str(tmp_path / "run" / "step_1.pt"), str(tmp_path / "run" / "step_2.pt"), str(fifo)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a regular file" in err
    os.replace(fifo, tmp_path / "run" / "step_9.pt")
    assert [os.path.basename(p) for p in find_checkpoints([str(tmp_path / "run")])] == ["step_1.pt", "step_2.pt"]
