"""Edges the type checker found: a value the types allow (None, another JSON shape) that the code met badly."""

from __future__ import annotations

import json
import math
import os

import pytest

from ckptview import desktop
from ckptview.core.figures.stats import TensorStats
from ckptview.core.read.values.slicing import parse_slice, resolve
from ckptview.core.series.discover import Position
from ckptview.core.series.model import CheckpointRef, SeriesResult, TensorSeries, module_series


@pytest.fixture(autouse=True)
def _private_config(tmp_path, monkeypatch):
    # mimeapps.list lives under XDG_CONFIG_HOME: never touch the developer's own.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "private-config"))


@pytest.mark.parametrize("content", ["[]", "null", '"text"', "3"])
def test_a_desktop_manifest_that_is_not_an_object_is_taken_as_absent(tmp_path, content):
    base = tmp_path / "share"
    manifest = base / desktop.MANIFEST
    manifest.parent.mkdir(parents=True)
    manifest.write_text(content)
    lines = desktop.install(str(base), refresh=False)
    assert any(line.startswith("installed ") for line in lines)
    record = json.loads(manifest.read_text())
    assert isinstance(record, dict) and record["files"]
    assert all(os.path.isfile(f) for f in record["files"])
    desktop.uninstall(str(base), refresh=False)
    assert not manifest.exists()


def _series(name: str, prev: TensorStats | None, dd: float, changed: int, numel: int) -> TensorSeries:
    s = TensorSeries.empty(name, 2)
    s.shapes[:] = [(numel,), (numel,)]
    s.stats[:] = [prev, TensorStats(numel=numel, l2=1.0)]
    s.sq_change[1], s.changed[1], s.compared[1] = dd, changed, numel
    return s


def test_a_module_skips_a_missing_previous_norm_as_its_tensors_do():
    refs = [CheckpointRef(f"c{i}.pt", Position(step=i)) for i in range(2)]
    result = SeriesResult(refs, "step")
    result.tensors = {"m.a": _series("m.a", TensorStats(numel=4, l2=2.0), 1.0, 2, 4),
                      "m.b": _series("m.b", None, 3.0, 1, 4)}
    (module,) = module_series(result)
    assert module.name == "m"
    # ||change|| over both tensors; the previous norm counts only the tensor whose previous figures exist.
    assert module.update_ratio[1] == pytest.approx(math.sqrt(1.0 + 3.0) / 2.0)
    assert module.frac_changed[1] == pytest.approx(3 / 8)


@pytest.mark.parametrize("spec", ["[..., 0]", "[1, ...]", "[...]", "[:, ..., 2]"])
def test_resolve_leaves_no_ellipsis(spec):
    index, shape = resolve((3, 4, 5), spec)
    assert Ellipsis not in index and len(index) == 3
    assert all(isinstance(i, int | slice) for i in index)
    assert index == resolve((3, 4, 5), parse_slice(spec))[0]
    assert len(shape) == sum(isinstance(i, slice) for i in index)
