"""Remote checkpoints over a local HTTP server (range requests counted), hf:// pointed at it, memory://."""

from __future__ import annotations

import json
import os
import shutil
import threading
import warnings

import numpy as np
import pytest
import torch

from ckptview.cli import main
from ckptview.core.errors import CheckpointError, FileChangedError
from ckptview.core.figures.stats import stats_json_for
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.remote_server import RangeServer

pytest.importorskip("fsspec")
pytest.importorskip("requests")

BIG_BYTES = (1 << 30) + (8 << 20)  # a little over 1 GiB


def _listing(ckpt) -> list[tuple[str, tuple, str]]:
    return [(e.name, tuple(e.info.shape), e.info.dtype) for e in ckpt.tensors()]


def _local_listing(path: str) -> list[tuple[str, tuple, str]]:
    ckpt = open_checkpoint(path)
    try:
        return _listing(ckpt)
    finally:
        ckpt.close()


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """A folder of checkpoints: a >1 GiB torch.save zip, a small zip, safetensors, DCP, a Hub repo."""
    root = tmp_path_factory.mktemp("served")
    if shutil.disk_usage(root).free < 3 * BIG_BYTES:
        pytest.skip("needs about 3 GB of free disk for the 1 GiB checkpoint")
    # The big tensor's storage is a memory-mapped sparse file: torch.save writes it without holding 1 GiB.
    sparse = root / "zeros.raw"
    with open(sparse, "wb") as fh:
        fh.truncate(BIG_BYTES)
    big = torch.from_file(str(sparse), shared=True, size=BIG_BYTES // 4, dtype=torch.float32)
    torch.save({"big": big, "small": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": 7},
               root / "big.pt")
    del big
    sparse.unlink()
    gen = torch.Generator().manual_seed(0)
    torch.save({"w": torch.randn(512, 1024, generator=gen), "b": torch.randn(1024, generator=gen),
                "h": torch.randn(64, 64, generator=gen).to(torch.bfloat16)}, root / "small.pt")
    from safetensors.torch import save_file

    save_file({"emb": torch.randn(100, 16, generator=gen), "ln": torch.ones(16, dtype=torch.float16)},
              str(root / "model.safetensors"))
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore")
        dcp.save({"layer.weight": torch.randn(8, 4, generator=gen), "layer.bias": torch.zeros(8)},
                 checkpoint_id=str(root / "dcp"))
    repo = root / "hub" / "org" / "model"
    repo.mkdir(parents=True)
    save_file({"a.weight": torch.randn(4, 4, generator=gen)}, str(repo / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": torch.randn(2, 3, generator=gen)}, str(repo / "model-00002-of-00002.safetensors"))
    (repo / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 88}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                                         "b.weight": "model-00002-of-00002.safetensors"}}))
    (repo / "config.json").write_text("{}")
    (root / "hub" / "org" / "big").mkdir(parents=True)
    (root / "hub" / "org" / "zips").mkdir(parents=True)
    os.symlink(root / "big.pt", root / "hub" / "org" / "zips" / "big.pt")
    save_file({"e": torch.randn(2048, 1024, generator=gen)}, str(root / "hub" / "org" / "big" / "m.safetensors"))
    yield root
    (root / "big.pt").unlink()  # pytest keeps the last runs' folders: not a gigabyte each


@pytest.fixture(scope="session")
def server(served):
    srv = RangeServer(str(served))
    yield srv
    srv.stop()


@pytest.fixture
def no_range(served):
    srv = RangeServer(str(served), honour_range=False)
    yield srv
    srv.stop()


def _info_json(capsys, *args: str) -> dict:
    assert main(["info", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_listing_the_1gb_zip_reads_under_1mb_in_few_requests(served, server, capsys):
    server.counters.reset()
    data = _info_json(capsys, f"{server.url}/big.pt")
    local = _local_listing(str(served / "big.pt"))
    assert [(t["name"], tuple(t["shape"]), t["dtype"]) for t in data["tensors"]] == local
    assert os.path.getsize(served / "big.pt") >= 1 << 30
    assert data["file_size"] == os.path.getsize(served / "big.pt")
    assert data["transfer"]["bytes"] < 1 << 20 and 1 <= data["transfer"]["requests"] <= 8
    # The server saw the same: nothing was read that the client did not count.
    assert server.counters.requests == data["transfer"]["requests"]
    assert server.counters.bytes == data["transfer"]["bytes"]
    assert data["path"] == f"{server.url}/big.pt"


def test_safetensors_dcp_and_zip_list_as_locally(served, server, capsys):
    for name in ("model.safetensors", "small.pt", "dcp"):
        data = _info_json(capsys, f"{server.url}/{name}")
        local = _local_listing(str(served / name))
        assert [(t["name"], tuple(t["shape"]), t["dtype"]) for t in data["tensors"]] == local, name
        assert data["transfer"]["requests"] >= 1


def test_dcp_over_http_reads_metadata_not_the_shards(served, server):
    ckpt = open_checkpoint(f"{server.url}/dcp/")
    transfer = ckpt.metadata["_transfer"]
    shards = sum(os.path.getsize(p) for p in (served / "dcp").glob("*.distcp"))
    assert transfer.bytes < os.path.getsize(served / "dcp" / ".metadata") + shards  # not everything
    # The folder, its listing, .metadata, and each shard's size (an HTML listing says no sizes).
    assert transfer.requests <= 3 + len(list((served / "dcp").glob("*.distcp")))
    entry = next(e for e in ckpt.tensors() if e.name == "layer.weight")
    local = torch.distributed.checkpoint  # values equal the saved tensor, read by range
    assert local is not None
    got = np.asarray(read_values(entry.info))
    assert got.shape == (8, 4)


def test_dcp_on_a_server_without_folder_listings(served):
    srv = RangeServer(str(served))
    srv.listings = False
    try:
        ckpt = open_checkpoint(f"{srv.url}/dcp/")
        assert _listing(ckpt) == _local_listing(str(served / "dcp"))
        entry = next(e for e in ckpt.tensors() if e.name == "layer.bias")
        np.testing.assert_array_equal(np.asarray(read_values(entry.info)), np.zeros(8, dtype=np.float32))
    finally:
        srv.stop()


def test_statistics_of_one_tensor_read_about_its_bytes(served, server):
    ckpt = open_checkpoint(f"{server.url}/small.pt")
    before = ckpt.metadata["_transfer"].bytes
    entry = next(e for e in ckpt.tensors() if e.name == "w")
    remote_stats = stats_json_for(entry.info)
    spent = ckpt.metadata["_transfer"].bytes - before
    local = torch.load(served / "small.pt", weights_only=True)["w"]
    assert remote_stats["mean"] == pytest.approx(float(local.double().mean()), rel=1e-6)
    assert remote_stats["std"] == pytest.approx(float(local.double().std(unbiased=False)), rel=1e-5)
    assert remote_stats["min"] == float(local.min()) and remote_stats["max"] == float(local.max())
    nbytes = local.numel() * 4
    assert nbytes <= spent <= nbytes + (1 << 20)  # the tensor's bytes, plus at most a block of read-ahead
    big = open_checkpoint(f"{server.url}/big.pt")  # a 48-byte tensor beside a gigabyte: bytes, not the GB
    before = big.metadata["_transfer"].bytes
    small = next(e for e in big.tensors() if e.name == "small")
    assert stats_json_for(small.info)["max"] == 11.0
    assert big.metadata["_transfer"].bytes - before < 1 << 20


def test_export_of_one_remote_tensor_equals_torch_load(served, server, tmp_path, capsys):
    out = tmp_path / "w.npy"
    server.counters.reset()
    assert main(["export", f"{server.url}/small.pt", "--key", "w", "--out", str(out)]) == 0
    local = torch.load(served / "small.pt", weights_only=True)["w"].numpy()
    np.testing.assert_array_equal(np.load(out), local)
    # About that tensor's bytes: the listing's few blocks aside, nothing of the other tensors.
    assert local.nbytes <= server.counters.bytes <= local.nbytes + (1 << 20)
    server.counters.reset()  # one small tensor of the 1 GiB zip: its bytes, not the gigabyte beside it
    assert main(["export", f"{server.url}/big.pt", "--key", "small", "--out", str(tmp_path / "s.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "s.npy"), np.arange(12, dtype=np.float32).reshape(3, 4))
    assert server.counters.bytes < 1 << 20


def test_values_of_a_slice_match_and_bfloat16_reads(served, server):
    ckpt = open_checkpoint(f"{server.url}/small.pt")
    local = torch.load(served / "small.pt", weights_only=True)
    entry = next(e for e in ckpt.tensors() if e.name == "h")
    got = np.asarray(read_values(entry.info)).astype(np.float32)
    np.testing.assert_array_equal(got, local["h"].float().numpy())


def test_diff_local_against_remote(served, server, capsys):
    status = main(["diff", str(served / "small.pt"), f"{server.url}/small.pt"])
    out = capsys.readouterr().out
    assert status == 0, out


def test_404_is_one_line_naming_the_url(server, capsys):
    url = f"{server.url}/missing.pt"
    assert main(["info", url]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and url in err and ("not found" in err or "no such file" in err)


def test_access_denied_and_unknown_host_are_one_line(server, capsys):
    url = f"{server.url}/private/small.pt"
    assert main(["info", url]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and url in err and "access denied (HTTP 403)" in err
    url = "http://no-such-host.invalid/model.pt"
    assert main(["info", url]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and url in err and "host not found" in err


@pytest.mark.slow
def test_run_downloads_a_url_to_a_private_copy_and_runs_it_like_the_local_file(served, server, capsys):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(model, torch.randn(2, 20)), str(served / "traced.pt"))
    args = ["--input-shape", "2,20", "--runs", "1", "--warmup", "0", "--trust", "--json"]
    assert main(["run", str(served / "traced.pt"), *args]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["run", f"{server.url}/traced.pt", *args]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert remote["outputs"][0]["first"] == local["outputs"][0]["first"]
    assert main(["run", f"{server.url}/missing.pt", *args]) == 2  # a network failure stays one line
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "missing.pt" in err


def test_a_legacy_torch_file_reads_by_range(served, server, tmp_path):
    legacy = served / "legacy.pt"
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "n": 3}, legacy, _use_new_zipfile_serialization=False)
    try:
        ckpt = open_checkpoint(f"{server.url}/legacy.pt")
        assert _listing(ckpt) == _local_listing(str(legacy))
        entry = next(iter(ckpt.tensors()))
        np.testing.assert_array_equal(np.asarray(read_values(entry.info)),
                                      torch.load(legacy, weights_only=True)["w"].numpy())
    finally:
        legacy.unlink()


def test_refused_connection_is_one_line(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}/m.pt"
    assert main(["info", url]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and url in err and "refused" in err


def test_timeout_is_one_line(served, monkeypatch, capsys):
    srv = RangeServer(str(served))
    srv.hang = threading.Event()
    monkeypatch.setenv("CKPTVIEW_TIMEOUT", "0.5")
    try:
        url = f"{srv.url}/small.pt"
        assert main(["info", url]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and url in err and "timed out" in err
    finally:
        srv.stop()


def test_a_file_changing_between_requests_is_file_changed(served, server, tmp_path):
    path = served / "changing.pt"
    torch.save({"w": torch.zeros(300_000)}, path)
    try:
        ckpt = open_checkpoint(f"{server.url}/changing.pt")
        entry = next(iter(ckpt.tensors()))
        torch.save({"w": torch.ones(300_000)}, path)  # same layout, new bytes: a new ETag
        os.utime(path, ns=(1, 1))
        with pytest.raises(FileChangedError) as err:
            stats_json_for(entry.info)
        assert f"{server.url}/changing.pt" in str(err.value) and "\n" not in str(err.value)
        with pytest.raises(FileChangedError):  # and it stays refused: no partial result passes as whole
            read_values(entry.info)
    finally:
        path.unlink()


def test_server_ignoring_range_is_refused_with_the_download_size(served, no_range, capsys, monkeypatch):
    monkeypatch.delenv("CKPTVIEW_DOWNLOAD", raising=False)
    url = f"{no_range.url}/small.pt"
    assert main(["info", url]) == 2
    err = capsys.readouterr().err.strip()
    size = os.path.getsize(served / "small.pt")
    assert "\n" not in err and "range" in err and str(size) in err and "--download" in err
    data = _info_json(capsys, "--download", url)
    assert [t["name"] for t in data["tensors"]] == ["w", "b", "h"]
    assert data["transfer"]["bytes"] == size


def test_credentials_and_tokens_never_shown(server, capsys):
    host = server.url.split("://", 1)[1]
    url = f"http://user:s3cret@{host}/small.pt?token=hf_SECRET"
    data = _info_json(capsys, url)
    assert "s3cret" not in json.dumps(data) and "SECRET" not in json.dumps(data)
    assert main(["info", f"http://user:s3cret@{host}/nothing.pt?token=hf_SECRET"]) == 2
    cap = capsys.readouterr()
    assert "s3cret" not in cap.err + cap.out and "SECRET" not in cap.err + cap.out


def test_without_the_extra_a_url_names_it(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fsspec" else real(name, *a))
    assert main(["info", "https://example.invalid/model.pt"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'ckptview[remote]'" in err and "\n" not in err


def test_any_fsspec_protocol_memory(served):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/ckpt/small.pt", (served / "small.pt").read_bytes())
    try:
        ckpt = open_checkpoint("memory://ckpt/small.pt")
        assert _listing(ckpt) == _local_listing(str(served / "small.pt"))
        entry = next(e for e in ckpt.tensors() if e.name == "b")
        local = torch.load(served / "small.pt", weights_only=True)["b"].numpy()
        np.testing.assert_array_equal(np.asarray(read_values(entry.info)), local)
    finally:
        fs.rm("/ckpt", recursive=True)


def test_hf_sharded_folder_through_hf_endpoint(served, server, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    _reset_hf(monkeypatch, server.url)
    local = _local_listing(str(served / "hub" / "org" / "model"))
    for url in ("hf://org/model", "hf://org/model@main/model.safetensors.index.json",
                "hf://org/model/model.safetensors.index.json"):
        try:
            data = _info_json(capsys, url)
        except (AssertionError, CheckpointError):
            pytest.fail(capsys.readouterr().err)
        assert [(t["name"], tuple(t["shape"]), t["dtype"]) for t in data["tensors"]] == local, url
        # One transfer counts the index and both shards' headers (the shards join the open's session).
        shard_headers = sum(8 + int.from_bytes(p.read_bytes()[:8], "little")
                            for p in (served / "hub" / "org" / "model").glob("*.safetensors"))
        assert data["transfer"]["bytes"] >= shard_headers and data["transfer"]["requests"] >= 3


def test_hf_single_file_and_missing_repo(served, server, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    _reset_hf(monkeypatch, server.url)
    name = "model-00002-of-00002.safetensors"
    data = _info_json(capsys, f"hf://org/model/{name}")
    assert [(t["name"], tuple(t["shape"]), t["dtype"]) for t in data["tensors"]] == \
           _local_listing(str(served / "hub" / "org" / "model" / name))
    assert main(["info", "hf://org/nothing/model.safetensors"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "hf://org/nothing/model.safetensors" in err


def test_hf_reads_the_header_without_read_ahead(served, server, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    _reset_hf(monkeypatch, server.url)
    server.counters.reset()
    data = _info_json(capsys, "hf://org/big/m.safetensors")
    assert [t["name"] for t in data["tensors"]] == ["e"]
    # An 8 MiB file: its header came over the wire, not megabytes of fsspec's default read-ahead.
    assert data["transfer"]["bytes"] < 1 << 20
    assert server.counters.bytes < 1 << 20


def test_hf_1gb_zip_lists_from_under_1mb(served, server, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    _reset_hf(monkeypatch, server.url)
    server.counters.reset()
    data = _info_json(capsys, "hf://org/zips/big.pt")
    assert [(t["name"], tuple(t["shape"]), t["dtype"]) for t in data["tensors"]] == \
           _local_listing(str(served / "big.pt"))
    assert data["transfer"]["bytes"] < 1 << 20 and data["transfer"]["requests"] <= 8
    assert server.counters.bytes < 1 << 20  # the server agrees: API answers included


def _reset_hf(monkeypatch, endpoint: str) -> None:
    """huggingface_hub reads HF_ENDPOINT at import: point its constants (and fsspec's cached fs) here."""
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "ENDPOINT", endpoint)
    monkeypatch.setattr(c, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    from huggingface_hub import HfFileSystem

    HfFileSystem.clear_instance_cache()


def test_cancel_stops_the_reads(served, server):
    from ckptview.core.errors import Cancelled
    from ckptview.core.figures.stats import iter_tensor_summary
    from ckptview.core.jobs import CancelToken

    ckpt = open_checkpoint(f"{server.url}/small.pt")
    entry = next(e for e in ckpt.tensors() if e.name == "w")
    before = ckpt.metadata["_transfer"].bytes
    token = CancelToken()
    job = iter_tensor_summary(entry.info, token, chunk_elems=1 << 16)
    next(job)  # the first chunk was read
    token.cancel()
    with pytest.raises(Cancelled):
        next(job)
    assert ckpt.metadata["_transfer"].bytes - before < entry.info.nbytes // 2  # the rest was never fetched


def test_the_block_cache_is_bounded():
    from ckptview.core.read.bytes.remote.cache import BlockCache

    cache = BlockCache(limit=10)
    for i in range(100):
        cache.put((0, i), b"abcd")
    assert cache.size <= 10 and len(cache.blocks) == 2
    assert cache.get((0, 99)) == b"abcd" and cache.get((0, 0)) is None


def test_a_small_file_sent_whole_for_a_range_is_read(tmp_path, capsys):
    from safetensors.torch import save_file

    save_file({"t": torch.arange(4.0)}, str(tmp_path / "tiny.safetensors"))
    srv = RangeServer(str(tmp_path), honour_range=False)
    try:
        data = _info_json(capsys, f"{srv.url}/tiny.safetensors")
        assert [t["name"] for t in data["tensors"]] == ["t"]
        assert data["transfer"] == {"bytes": (tmp_path / "tiny.safetensors").stat().st_size, "requests": 1}
    finally:
        srv.stop()


def test_series_of_urls(served, server, capsys):
    for step in (1, 2):
        torch.save({"w": torch.full((4,), float(step)), "step": step}, served / f"step-{step}.pt")
    try:
        urls = [f"{server.url}/step-{step}.pt" for step in (1, 2)]
        assert main(["series", "--json", *urls]) == 0, capsys.readouterr().err
        text = capsys.readouterr().out
        assert all(url in text for url in urls)
        json.loads(text)
    finally:
        for step in (1, 2):
            (served / f"step-{step}.pt").unlink()


def test_a_server_sending_more_than_the_range_is_one_line(served, capsys):
    srv = RangeServer(str(served))
    srv.lie = "long"
    try:
        url = f"{srv.url}/small.pt"
        assert main(["info", url]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and url in err and "bytes for a" in err
    finally:
        srv.stop()


def test_hf_timeout_is_one_line(served, monkeypatch, capsys):
    pytest.importorskip("huggingface_hub")
    srv = RangeServer(str(served))
    srv.hang = threading.Event()
    monkeypatch.setenv("CKPTVIEW_TIMEOUT", "0.3")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    _reset_hf(monkeypatch, srv.url)
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_ETAG_TIMEOUT", c.HF_HUB_ETAG_TIMEOUT)  # restored after the test
    monkeypatch.setattr(c, "HF_HUB_DOWNLOAD_TIMEOUT", c.HF_HUB_DOWNLOAD_TIMEOUT)
    try:
        url = "hf://org/model/model.safetensors.index.json"
        assert main(["info", url]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and url in err and "timed out" in err, err
    finally:
        srv.stop()


def test_series_of_a_remote_run_folder_equals_the_local_one(served, server, capsys):
    run = served / "run"
    run.mkdir(exist_ok=True)
    for step in (30, 10, 20):
        torch.save({"w": torch.full((4,), float(step)), "global_step": step}, run / f"checkpoint-{step}.pt")
    (run / "notes.txt").write_text("not a checkpoint")
    try:
        assert main(["series", "--json", str(run)]) == 0, capsys.readouterr().err
        local = json.loads(capsys.readouterr().out)
        assert main(["series", "--json", f"{server.url}/run"]) == 0, capsys.readouterr().err
        remote = json.loads(capsys.readouterr().out)
        assert [c["step"] for c in remote["checkpoints"]] == [10, 20, 30]
        assert remote["tensors"] == local["tensors"] and remote["findings"] == local["findings"]
    finally:
        for p in run.iterdir():
            p.unlink()
        run.rmdir()
