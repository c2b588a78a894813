"""A remote folder of shards lists at the speed of round trips: every header asked for at once (a bounded
pool), one request a shard where its header fits the first range, connections kept, progress, a cancel
that cuts what is in flight. The local range server holds the first N shard requests until N are in
flight together, so a client that asks one at a time fails on the counts instead of passing by luck."""

from __future__ import annotations

import os
import re
import threading

import pytest

from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.bytes.remote.file import FIRST
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.open import open_checkpoint
from tests.support.remote_server import RangeServer
from tests.support.shards import Shards, write_shards

pytest.importorskip("requests")

SHARD = re.compile(r"\.safetensors$")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Shards]:
    """24 shards whose headers fit the first range, and 12 whose headers run past it; each shard holds a
    256 KiB tensor too, so reading a shard whole shows in the bytes."""
    root = tmp_path_factory.mktemp("shards")
    return {"short": write_shards(str(root / "short"), 24, 40, pad_bytes=256 << 10),
            "long": write_shards(str(root / "long"), 12, 600, pad_bytes=256 << 10)}


@pytest.fixture
def server(folders):
    srv = RangeServer(os.path.dirname(folders["short"].folder))
    yield srv
    srv.stop()


def _listing(ckpt) -> list[tuple[str, tuple, str]]:
    return sorted((e.name, tuple(e.info.shape), e.info.dtype) for e in ckpt.tensors())


def _local(shards: Shards) -> list[tuple[str, tuple, str]]:
    ckpt = open_checkpoint(shards.folder)
    try:
        return _listing(ckpt)
    finally:
        ckpt.close()


def _shard_requests(srv: RangeServer) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in srv.counters.paths:
        name = path.rsplit("/", 1)[-1]
        if SHARD.search(name):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _open(url: str, concurrency: int, **ctx) -> object:
    return open_checkpoint(url, ReaderContext(remote=RemoteOptions(concurrency=concurrency), **ctx))


def test_every_shard_header_is_asked_for_at_once_one_request_a_shard(folders, server):
    shards = folders["short"]
    server.shaping.delay = 0.01  # a round trip
    server.shaping.hold(8, SHARD.pattern)  # the first 8 shard requests go on only once 8 are in flight
    ckpt = _open(f"{server.url}/short/", concurrency=8)
    assert _listing(ckpt) == _local(shards)
    assert server.shaping.hold_timeouts == 0  # 8 were in flight together...
    assert server.shaping.max_in_flight == 8  # ... and never more than the pool allows
    requests = _shard_requests(server)
    assert sorted(requests) == sorted(shards.names) and set(requests.values()) == {1}  # one request a shard
    for name in shards.names:  # the header's bytes (within the first range), never the 256 KiB tensor
        assert server.counters.bytes_by_path[f"/short/{name}"] <= max(1.1 * shards.headers[name], FIRST)
    # Besides: the folder with its listing in one request, a look for DCP's `.metadata` (a web server's
    # listing may hide dot files), the index in two (its 86 KB run past the first range).
    assert server.counters.requests <= len(shards.names) + 4
    assert ckpt.metadata["_transfer"].requests == server.counters.requests


def test_a_longer_header_costs_exactly_the_rest_and_teaches_the_next_shards(folders, server):
    shards = folders["long"]
    assert min(shards.headers.values()) > FIRST
    server.shaping.hold(4, SHARD.pattern)
    ckpt = _open(f"{server.url}/long/", concurrency=4)
    assert _listing(ckpt) == _local(shards)
    assert server.shaping.hold_timeouts == 0 and server.shaping.max_in_flight <= 4
    requests = _shard_requests(server)
    assert set(requests.values()) <= {1, 2}
    # Only shards asked for before any header of theirs was known needed a second request: after that,
    # the first range is as long as the headers the session has seen, and a tenth more.
    assert sum(1 for n in requests.values() if n == 2) <= 4 + 3
    assert sum(1 for n in requests.values() if n == 1) >= len(shards.names) - 7
    for name in shards.names:
        assert server.counters.bytes_by_path[f"/long/{name}"] <= 1.1 * shards.headers[name] + 1


def test_connections_are_kept_and_reused(folders, server):
    ckpt = _open(f"{server.url}/short/", concurrency=4)
    assert len(ckpt.tensors()) == sum(1 for _ in _local(folders["short"]))
    assert server.counters.requests > 20
    assert len(server.counters.connections) <= 4 + 1  # a pool of 4, not a connection a request


def test_a_remote_open_reports_shards_read_of_all(folders, server):
    seen: list[Progress] = []
    _open(f"{server.url}/short/", concurrency=8, progress=seen.append)
    counted = [p for p in seen if "shards read" in p.message]
    total = len(folders["short"].names)
    assert [p.done for p in counted] == list(range(1, total + 1))
    assert {p.total for p in counted} == {total} and counted[-1].message == f"{total} of {total} shards read"


def test_cancel_cuts_the_requests_in_flight(folders, server):
    """Shard requests that are never answered: cancelling the open ends it and every thread of its pool
    (their sockets are shut), long before any request's deadline (600 s here) would have."""
    blocked = server.shaping.block(SHARD.pattern)
    token = CancelToken()
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            open_checkpoint(f"{server.url}/short/",
                            ReaderContext(cancel=token, remote=RemoteOptions(concurrency=4, deadline=600)))
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc

    opener = threading.Thread(target=run)
    opener.start()
    assert server.shaping.wait_in_flight(4)  # four shard requests wait on the server
    token.cancel()
    opener.join(60)
    assert not opener.is_alive()
    assert isinstance(outcome.get("error"), Cancelled), outcome
    pool = [t for t in threading.enumerate() if t.name == "ckptview-fan-out"]
    for thread in pool:  # cut: each returns now, while the server still holds its request
        thread.join(60)
    assert not any(t.is_alive() for t in pool)
    assert not blocked.is_set()


def test_a_host_without_range_support_is_said_once(folders, tmp_path):
    shards = write_shards(str(tmp_path / "small"), 3, 4, pad_bytes=128 << 10)  # past the first range
    srv = RangeServer(str(tmp_path), honour_range=False)
    try:
        with pytest.raises(CheckpointError, match="does not honour range requests"):
            _open(f"{srv.url}/small/", concurrency=4)
        ckpt = open_checkpoint(f"{srv.url}/small/",
                               ReaderContext(remote=RemoteOptions(download=True, concurrency=4)))
        assert _listing(ckpt) == _local(shards)
        said = [w for w in ckpt.warnings if "range requests" in w]
        assert len(said) == 1 and "3 files were downloaded whole" in said[0], ckpt.warnings
    finally:
        srv.stop()


def test_hf_repo_of_shards_through_huggingface_hub(folders, tmp_path, monkeypatch):
    """hf://ORG/REPO through huggingface_hub's HfFileSystem, pointed at the local stand-in of the Hub: the
    same pool, one ranged GET a shard, and the listing of the local folder."""
    pytest.importorskip("huggingface_hub")
    import shutil

    shards = folders["short"]
    shutil.copytree(shards.folder, tmp_path / "hub" / "org" / "shards")
    srv = RangeServer(str(tmp_path))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    import huggingface_hub.constants as c
    from huggingface_hub import HfFileSystem

    monkeypatch.setattr(c, "ENDPOINT", srv.url)
    monkeypatch.setattr(c, "HUGGINGFACE_CO_URL_TEMPLATE", srv.url + "/{repo_id}/resolve/{revision}/{filename}")
    HfFileSystem.clear_instance_cache()
    srv.shaping.delay = 0.01
    srv.shaping.hold(8, SHARD.pattern)
    try:
        ckpt = _open("hf://org/shards", concurrency=8)
        assert _listing(ckpt) == _local(shards)
        assert srv.shaping.hold_timeouts == 0 and srv.shaping.max_in_flight == 8
        requests = _shard_requests(srv)
        assert sorted(requests) == sorted(shards.names) and set(requests.values()) == {1}
        for name in shards.names:
            assert srv.counters.bytes_by_path[f"/org/shards/resolve/main/{name}"] <= FIRST
    finally:
        HfFileSystem.clear_instance_cache()
        srv.stop()


def test_the_command_line_shows_shards_read_on_a_terminal_only(folders, server, monkeypatch, capsys):
    import io
    import json
    import sys

    from ckptview.cli import main

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["info", "--json", f"{server.url}/short/"]) == 0
    total = len(folders["short"].names)
    assert f"ckptview: {total} of {total} shards read" in terminal.getvalue()
    assert terminal.getvalue().endswith("\r")  # the line cleared before the listing
    assert len(json.loads(capsys.readouterr().out)["tensors"]) == total * (40 + 1)  # and each its pad
    monkeypatch.undo()
    assert main(["info", "--json", f"{server.url}/short/"]) == 0  # a script's stderr: nothing
    assert capsys.readouterr().err == ""


def test_a_remote_training_folder_reads_its_files_at_once(tmp_path):
    """A Trainer step folder over https://: its optimizer, scheduler, RNG and scaler files are opened at
    once too (the server holds the four until all four are in flight), and list as the local folder does."""
    import json

    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    model = torch.nn.Linear(4, 3)
    save_file(model.state_dict(), str(folder / "model.safetensors"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    torch.save(opt.state_dict(), folder / "optimizer.pt")
    torch.save(torch.optim.lr_scheduler.StepLR(opt, 2).state_dict(), folder / "scheduler.pt")
    torch.save({"python": 1, "cpu": torch.get_rng_state()}, folder / "rng_state.pth")
    torch.save({"scale": 1024.0, "growth_factor": 2.0}, folder / "scaler.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    srv = RangeServer(str(tmp_path))
    srv.shaping.hold(4, r"\.(pt|pth)$")
    try:
        ckpt = _open(f"{srv.url}/checkpoint-4/", concurrency=8)
        assert srv.shaping.hold_timeouts == 0 and srv.shaping.max_in_flight >= 4
        local = open_checkpoint(str(folder))
        assert _listing(ckpt) == _listing(local)
        assert [c.key for c in ckpt.root.children] == [c.key for c in local.root.children]
        local.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("listings", [True, False], ids=["listed", "object-store"])
def test_a_missing_remote_shard_is_the_same_warning_as_a_local_one(tmp_path, listings):
    """No request asks first whether a shard is there: its open's first request tells (a 404), and the
    listing says what the local folder's does."""
    shards = write_shards(str(tmp_path / "m"), 3, 5)
    os.unlink(os.path.join(shards.folder, shards.names[1]))
    srv = RangeServer(str(tmp_path))
    srv.listings = listings
    try:
        ckpt = _open(f"{srv.url}/m/model.safetensors.index.json", concurrency=4)
        local = open_checkpoint(shards.index)
        assert _listing(ckpt) == _listing(local)
        assert [w for w in ckpt.warnings if "missing" in w] == [w for w in local.warnings if "missing" in w] != []
        local.close()
    finally:
        srv.stop()
