"""Whole-checkpoint work on a real Dask cluster (`dask scheduler` + `dask worker` processes started here):
the figures of the local run, bit for bit; each worker reads the files itself; a worker lost mid-run."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from ckptview.cli import main
from tests.support.dask_processes import DaskProcesses

pytest.importorskip("distributed")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    procs = DaskProcesses(tmp_path_factory.mktemp("dask"), workers=2)
    yield procs
    procs.close()


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _json(argv: list[str]) -> dict:
    code, out, err = _run(argv)
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("which", ["llama_folder", "mixed_pt"])
def test_info_stats_and_spectra_on_dask_equal_the_local_run(cluster, which, request):
    path = str(request.getfixturevalue(which))
    local = _json(["info", path, "--json", "--stats", "--spectral", "--workers", "1"])
    remote = _json(["info", path, "--json", "--stats", "--spectral", "--scheduler", cluster.address])
    assert remote == local
    assert any(t.get("spectral") for t in local["tensors"]) and all("stats" in t for t in local["tensors"])
