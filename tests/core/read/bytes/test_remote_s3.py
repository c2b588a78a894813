"""s3:// through s3fs against a real S3-compatible server started here (moto's server mode on 127.0.0.1,
its answers shaped and counted: `tests/support/s3_server.py`), when the test dependencies have it."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from ckptview.core.read.bytes.remote.file import FIRST
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

from tests.support.s3_server import ShapedMotoServer  # noqa: E402 - needs moto, checked above
from tests.support.shards import write_shards  # noqa: E402


@pytest.fixture
def moto(monkeypatch):
    server = ShapedMotoServer()
    server.start()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": server.endpoint}.items():
        monkeypatch.setenv(key, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    yield server
    s3fs.S3FileSystem.clear_instance_cache()
    server.stop()


@pytest.fixture
def s3(moto):
    return boto3.client("s3", endpoint_url=moto.endpoint)


def test_s3_zip_lists_and_reads_like_the_local_file(s3, tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(64, 32), "b": torch.arange(5, dtype=torch.int64)}, path)
    s3.create_bucket(Bucket="ckpts")
    s3.put_object(Bucket="ckpts", Key="run/m.pt", Body=path.read_bytes())
    ckpt = open_checkpoint("s3://ckpts/run/m.pt")
    local = open_checkpoint(str(path))
    assert [(e.name, e.info.shape, e.info.dtype) for e in ckpt.tensors()] == \
           [(e.name, e.info.shape, e.info.dtype) for e in local.tensors()]
    want = torch.load(path, weights_only=True)
    for entry in ckpt.tensors():
        np.testing.assert_array_equal(np.asarray(read_values(entry.info)), want[entry.name].numpy())
    assert ckpt.metadata["_transfer"].requests >= 1
    local.close()


def test_s3_sharded_folder_lists_its_shards_at_once(moto, s3, tmp_path):
    """A folder of 16 shards in a bucket: every header asked for at once (the server holds the first 8
    shard requests until 8 are in flight; never more than the pool of 8), one ranged GET a shard of at most
    its first range, never the shard's 256 KiB tensor, and the listing equal to the local folder's."""
    shards = write_shards(str(tmp_path / "m"), 16, 40, pad_bytes=256 << 10)
    s3.create_bucket(Bucket="ckpts")
    for name in os.listdir(shards.folder):
        s3.upload_file(os.path.join(shards.folder, name), "ckpts", f"run/m/{name}")
    moto.counters.reset()
    moto.shaping.delay = 0.01  # a round trip
    moto.shaping.rate = 4 << 20  # and 4 MB/s a connection
    moto.shaping.hold(8, r"\.safetensors$")
    ckpt = open_checkpoint("s3://ckpts/run/m/", ReaderContext(remote=RemoteOptions(concurrency=8)))
    local = open_checkpoint(shards.folder)
    assert sorted(e.name for e in ckpt.tensors()) == sorted(e.name for e in local.tensors())
    assert moto.shaping.hold_timeouts == 0 and moto.shaping.max_in_flight == 8
    shard_paths = [p for p in moto.counters.paths if re.search(r"\.safetensors$", p)]
    assert sorted(p.rsplit("/", 1)[-1] for p in shard_paths) == sorted(shards.names)  # one request each
    for name in shards.names:
        assert moto.counters.bytes_by_path[f"/ckpts/run/m/{name}"] <= max(1.1 * shards.headers[name], FIRST)
    # Besides the shards: the folder (HEAD, then a one-key listing), its listing, the index.
    assert moto.counters.requests <= len(shards.names) + 4
    entry = next(e for e in ckpt.tensors() if e.name.endswith("experts.0.gate_proj.weight"))
    np.testing.assert_array_equal(np.asarray(read_values(entry.info)),
                                  np.asarray(read_values(local.tensor(entry.name))))
    local.close()
