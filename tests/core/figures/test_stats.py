"""Streamed statistics compared with torch on the same tensors, across dtypes, NaN/Inf, empty and 0-dim."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest
import torch

from ckptview.core.errors import Cancelled
from ckptview.core.figures.stats import JSON_KEYS, compute_stats, iter_summary, merge_stats
from ckptview.core.jobs import CancelToken, drain

_ML = {
    torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
    torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2),
}


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """The logical values as ckptview.core.read.values.reading yields them (ml_dtypes for bf16/fp8)."""
    t = t.contiguous()
    if t.dtype in _ML:
        carrier, np_type = _ML[t.dtype]
        return t.view(carrier).numpy().view(np_type)
    return t.numpy()


def chunked(t: torch.Tensor, size: int) -> list[np.ndarray]:
    flat = to_numpy(t).reshape(-1)
    return [flat[i : i + size] for i in range(0, flat.size, size)]


def make(dtype: torch.dtype, shape: tuple[int, ...], special: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash((str(dtype), shape)) % 1000)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.3
    if not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    base = torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 0.5
    if dtype.is_complex:
        base = torch.complex(base, torch.randn(shape, generator=g, dtype=torch.float64))
    flat = base.reshape(-1)
    if flat.numel() > 10:
        flat[::7] = 0
        if special:
            flat[1] = math.nan
            flat[2] = math.inf
            flat[3] = -math.inf
            flat[5] = math.nan
    return base.to(dtype)


def reference(t: torch.Tensor) -> dict:
    """What torch says about the finite values (in float64)."""
    x = t.to(torch.complex128).abs() if t.is_complex() else t
    x = x.to(torch.float64).reshape(-1)
    finite = x[torch.isfinite(x)]
    n = finite.numel()
    return {
        "numel": t.numel(),
        "nan": int(torch.isnan(x).sum()),
        "posinf": int((x == math.inf).sum()),
        "neginf": int((x == -math.inf).sum()),
        "zeros": int((finite == 0).sum()),
        "mean": float(finite.mean()) if n else None,
        "std": float(torch.std(finite)) if n > 1 else None,  # correction=1, torch's default
        "min": float(torch.amin(finite)) if n else None,
        "max": float(torch.amax(finite)) if n else None,
        "abs_max": float(finite.abs().max()) if n else None,
        "l2": float(torch.linalg.vector_norm(finite)),
    }


DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64,
]
SHAPES = [(), (0,), (3, 0, 2), (1,), (37, 53)]


def check(got: dict, want: dict) -> None:
    for key in JSON_KEYS:
        g, w = got[key], want[key]
        if w is None:
            assert g is None, key
        elif key in ("numel", "nan", "posinf", "neginf", "zeros"):
            assert g == w, key
        else:
            assert g == pytest.approx(w, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_stats_match_torch(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    special = dtype.is_floating_point or dtype.is_complex
    t = make(dtype, shape, special)
    # Chunks much smaller than the tensor: the merge across chunks is what is tested.
    got = compute_stats(chunked(t, 100)).to_json()
    check(got, reference(t))
    assert list(got) == list(JSON_KEYS)
    json.dumps(got, allow_nan=False)


def test_nan_and_inf_do_not_poison_the_other_figures() -> None:
    t = torch.tensor([1.0, math.nan, 3.0, math.inf, -math.inf, 0.0])
    s = compute_stats(chunked(t, 2))
    assert (s.nan, s.posinf, s.neginf, s.zeros, s.numel) == (1, 1, 1, 1, 6)
    assert s.mean == pytest.approx(4 / 3)
    assert (s.min, s.max, s.abs_max) == (0.0, 3.0, 3.0)


def test_integer_min_max_stay_exact_integers() -> None:
    t = torch.tensor([2**62, -(2**62) - 5, 7], dtype=torch.int64)
    s = compute_stats(chunked(t, 2))
    assert s.min == -(2**62) - 5 and s.max == 2**62 and s.abs_max == 2**62 + 5
    assert isinstance(s.min, int)


def test_bool_mean_is_fraction_true() -> None:
    t = torch.tensor([True, False, True, True])
    s = compute_stats(chunked(t, 3))
    assert s.mean == 0.75 and s.min == 0 and s.max == 1 and s.zeros == 1


def test_empty_and_all_nan_have_null_figures() -> None:
    assert compute_stats([]).to_json() == {
        "numel": 0, "mean": None, "std": None, "min": None, "max": None, "abs_max": None,
        "l2": 0.0, "zeros": 0, "nan": 0, "posinf": 0, "neginf": 0,
    }
    s = compute_stats(chunked(torch.full((5,), math.nan), 2)).to_json()
    assert s["nan"] == 5 and s["mean"] is None and s["min"] is None


def test_float32_large_offset_is_numerically_careful() -> None:
    # A naive sum of squares in float32 would lose the spread entirely.
    t = (torch.randn(50_000, dtype=torch.float64) * 1e-3 + 1e4).float()
    s = compute_stats(chunked(t, 4096))
    ref = t.double()
    assert s.std == pytest.approx(float(ref.std()), rel=1e-9)
    assert s.mean == pytest.approx(float(ref.mean()), rel=1e-12)


def test_merge_equals_concatenation() -> None:
    a = make(torch.float32, (300,), True)
    b = make(torch.int16, (77,), False)
    c = make(torch.bfloat16, (0,), False)
    merged = merge_stats(compute_stats(chunked(t, 50)) for t in (a, b, c))
    whole = torch.cat([a.double(), b.double(), c.double()])
    check(merged.to_json(), reference(whole))


def test_progress_and_cancel() -> None:
    chunks = chunked(torch.randn(1000), 100)
    steps = list(iter_summary(chunks, total=1000))
    assert [p.done for p in steps] == list(range(100, 1001, 100)) and steps[-1].fraction == 1.0
    token = CancelToken()
    gen = iter_summary(chunks, total=1000, token=token)
    next(gen)
    token.cancel()
    with pytest.raises(Cancelled):
        drain(gen)


def test_stats_of_a_saved_file_match_torch_load(tmp_path) -> None:
    pytest.importorskip("ckptview.core.read.values.reading")
    from ckptview.core import open_checkpoint
    from ckptview.core.figures.stats import tensor_stats

    sd = {
        "w": make(torch.bfloat16, (40, 30), True),
        "b": make(torch.float32, (1000,), True),
        "t": make(torch.float32, (20, 30), True).t(),  # a non-contiguous view over its storage
        "i": make(torch.int32, (3, 4), False),
    }
    path = tmp_path / "m.pt"
    torch.save(sd, path)
    loaded = torch.load(path, weights_only=True)
    ckpt = open_checkpoint(str(path))
    try:
        for name, t in loaded.items():
            check(tensor_stats(ckpt.tensor(name), chunk_elems=64).to_json(), reference(t))
    finally:
        ckpt.close()


# -- expanded (stride 0) tensors: figures from what is stored, each value counted as often as it repeats --


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.float16], ids=str)
def test_expanded_tensor_stats_and_histogram_match_torch(tmp_path, dtype) -> None:
    from ckptview.core import open_checkpoint
    from ckptview.core.figures.histogram import iter_tensor_histogram
    from ckptview.core.figures.stats import tensor_stats

    base = make(dtype, (6, 1, 5), special=dtype.is_floating_point)
    expanded = base.expand(6, 300, 5)  # stride 0 along dim 1: 9,000 elements from 30 stored
    twice = base.reshape(1, 6, 5).expand(4, 6, 5).unsqueeze(2).expand(4, 6, 7, 5)  # two stride-0 dims
    path = tmp_path / "e.pt"
    torch.save({"e": expanded, "t": twice}, path)
    loaded = torch.load(path, weights_only=True)
    assert loaded["e"].stride()[1] == 0  # torch.save keeps the expansion: the file stores 30 values
    ckpt = open_checkpoint(path)
    for name in ("e", "t"):
        info = ckpt.tensor(name)
        want = loaded[name].contiguous()
        check(tensor_stats(info, chunk_elems=7).to_json(), reference(want))
        hist = drain(iter_tensor_histogram(info, bins=10, chunk_elems=7))
        x = want.to(torch.float64).reshape(-1)
        finite = x[torch.isfinite(x)].numpy()
        counts, _ = np.histogram(finite, bins=10, range=(finite.min(), finite.max()))
        assert hist.counts.tolist() == counts.tolist() and hist.looked_at == want.numel()


def test_huge_expanded_tensor_costs_what_it_stores(tmp_path, monkeypatch) -> None:
    """1e12 declared elements over 1000 stored: exact figures, reading 1000 elements once."""
    from ckptview import cli
    from ckptview.core import open_checkpoint
    from ckptview.core.figures.histogram import iter_tensor_histogram, tensor_sample_histogram
    from ckptview.core.figures.stats import tensor_stats
    from ckptview.core.read.values import reading as values

    rows = 10**9
    path = tmp_path / "huge.pt"
    torch.save({"h": torch.arange(1000.0).expand(rows, 1000)}, path)
    info = open_checkpoint(path).tensor("h")
    from ckptview.core.figures import stats

    read = []
    real = values.iter_chunks  # as the statistics read values
    monkeypatch.setattr(stats, "iter_chunks", lambda i, n=1 << 22, ahead=None, **kw: (read.append(c.size) or c for c in real(i, n, ahead, **kw)))
    s = tensor_stats(info)
    assert sum(read) == 1000  # a counter, not a clock: the work is the bytes stored
    n = rows * 1000
    stored = np.arange(1000.0)
    assert (s.numel, s.zeros, s.nan, s.min, s.max) == (n, rows, 0, 0.0, 999.0)
    assert s.mean == pytest.approx(499.5, rel=1e-12)
    assert s.std == pytest.approx(math.sqrt(stored.var() * n / (n - 1)), rel=1e-9)
    assert s.l2 == pytest.approx(math.sqrt(rows * float(np.dot(stored, stored))), rel=1e-9)
    hist = drain(iter_tensor_histogram(info, bins=4))
    assert hist.counts.tolist() == [250 * rows] * 4
    preview = tensor_sample_histogram(info, bins=4)
    assert int(preview.counts.sum()) <= 1000
    assert cli.main(["info", str(path), "--json", "--stats"]) == 0
