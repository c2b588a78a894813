"""One `RemoteOptions`, built by cli.py from the command line (`--download`, `--max-download`, `--deadline`)
with the environment's CKPTVIEW_* as defaults, reaches every read of a URL: in every command, in a series'
worker processes, in a run's download, and in the window (its workspace and its series tabs)."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from ckptview.cli import main, remote_options
from ckptview.core.read.bytes.remote.options import RemoteOptions
from tests.support.remote_server import RangeServer

pytest.importorskip("fsspec")
pytest.importorskip("requests")

REFUSED = "pass --download"  # what a server that ignores Range gets without --download


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch):
    for name in ("CKPTVIEW_DOWNLOAD", "CKPTVIEW_MAX_DOWNLOAD", "CKPTVIEW_DEADLINE", "CKPTVIEW_TIMEOUT",
                 "CKPTVIEW_CONCURRENCY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def no_range(tmp_path_factory):
    """A server that ignores Range, over two checkpoints of a run and a traced model."""
    root = tmp_path_factory.mktemp("served")
    for step in (1, 2):
        torch.save({"w": torch.full((64,), float(step)), "step": step}, root / f"step-{step}.pt")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 3)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(model, torch.randn(2, 6)), str(root / "traced.pt"))
    server = RangeServer(str(root), honour_range=False)
    yield server
    server.stop()


def _urls(server) -> list[str]:
    return [f"{server.url}/step-{step}.pt" for step in (1, 2)]


def test_the_environment_gives_defaults_and_the_command_line_wins():
    env = {"CKPTVIEW_DOWNLOAD": "1", "CKPTVIEW_MAX_DOWNLOAD": "2M", "CKPTVIEW_DEADLINE": "7", "CKPTVIEW_TIMEOUT": "0.5"}
    options, rest = remote_options(["info", "x.pt"], env)
    assert options == RemoteOptions(download=True, max_download=2 << 20, deadline=7.0, timeout=0.5)
    assert rest == ["info", "x.pt"]
    options, rest = remote_options(["info", "--deadline", "3", "x.pt", "--max-download=1K"], {"CKPTVIEW_DEADLINE": "7"})
    assert options == RemoteOptions(max_download=1024, deadline=3.0) and rest == ["info", "x.pt"]
    assert remote_options([], {"CKPTVIEW_DEADLINE": "soon", "CKPTVIEW_TIMEOUT": "-"})[0] == RemoteOptions()


def test_concurrency_from_the_environment_and_the_command_line():
    options, rest = remote_options(["info", "x.pt"], {"CKPTVIEW_CONCURRENCY": "8"})
    assert options.concurrency == 8 and rest == ["info", "x.pt"]
    options, rest = remote_options(["--concurrency", "4", "info", "x.pt"], {"CKPTVIEW_CONCURRENCY": "8"})
    assert options.concurrency == 4 and rest == ["info", "x.pt"]
    assert remote_options(["--concurrency=64"], {})[0].concurrency == 64
    assert remote_options([], {"CKPTVIEW_CONCURRENCY": "many"})[0] == RemoteOptions()
    assert RemoteOptions(concurrency=1000).concurrency == 64  # a host is never asked for more at once
    for bad in ("0", "65", "four"):
        with pytest.raises(ValueError, match="--concurrency"):
            remote_options(["--concurrency", bad], {})


def test_info_reads_a_folders_shards_with_the_command_lines_concurrency(tmp_path, capsys):
    from tests.support.shards import write_shards

    shards = write_shards(str(tmp_path / "m"), 9, 10)
    srv = RangeServer(str(tmp_path))
    srv.shaping.hold(3, r"\.safetensors$")  # three shard requests wait until three are in flight
    try:
        assert main(["info", "--json", "--concurrency", "3", f"{srv.url}/m/"]) == 0, capsys.readouterr().err
        data = json.loads(capsys.readouterr().out)
        assert len(data["tensors"]) == 9 * 10 and data["transfer"]["requests"] >= len(shards.names)
        assert srv.shaping.hold_timeouts == 0 and srv.shaping.max_in_flight == 3
    finally:
        srv.stop()


def test_series_reads_urls_with_the_command_lines_options(no_range, capsys):
    assert main(["series", "--json", "--no-cache", *_urls(no_range)]) != 0
    assert REFUSED in capsys.readouterr().err
    assert main(["series", "--json", "--no-cache", "--download", *_urls(no_range)]) == 0, capsys.readouterr().err
    data = json.loads(capsys.readouterr().out)
    assert [c["step"] for c in data["checkpoints"]] == [1, 2]
    assert [c.get("error") for c in data["checkpoints"]] == [None, None]


def test_a_series_read_in_worker_processes_reads_with_the_same_options(no_range, capsys, monkeypatch):
    from ckptview.core.series import live

    monkeypatch.setattr(live, "POOL_MIN_BYTES", 0)  # two small checkpoints: read in two worker processes anyway
    assert main(["series", "--json", "--no-cache", "--workers", "2", "--download", *_urls(no_range)]) == 0, \
        capsys.readouterr().err
    data = json.loads(capsys.readouterr().out)
    assert [c.get("error") for c in data["checkpoints"]] == [None, None]
    assert data["tensors"][0]["norm"][1] == pytest.approx(2.0 * 8)  # measured: ||2 * ones(64)|| = 16


def test_a_run_downloads_its_url_with_the_command_lines_options(no_range, capsys):
    args = [f"{no_range.url}/traced.pt", "--input-shape", "2,6", "--runs", "1", "--warmup", "0", "--trust", "--json"]
    assert main(["run", *args]) != 0
    err = capsys.readouterr().err
    assert REFUSED in err and "\n" not in err.strip()
    assert main(["run", "--download", *args]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["outputs"][0]["shape"] == [2, 3]
