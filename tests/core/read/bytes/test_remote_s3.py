"""s3:// against a local S3 emulator (moto's server mode), when the test dependencies have it."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")


@pytest.fixture
def s3(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(key, value)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    yield boto3.client("s3", endpoint_url=endpoint)
    s3fs.S3FileSystem.clear_instance_cache()
    server.stop()


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
