"""Downloading a file whose server ignores range requests: the consent of one open, its progress, its cancel,
and a whole copy (issue 35, finding 7).

The window's "Download and open" consents for one open (the `RemoteOptions` of its `ReaderContext`), never
for the process: a later open of the same URL is refused again. The download reports each piece and stops at the open's
cancel. The copy is the whole file: a 4 MiB torch file (not a multiple of the copy's buffer) opened with
--download was read short by its last 1,733 bytes ("truncated or corrupt zip"), its size taken before the
buffer was written out.
"""

from __future__ import annotations

import pytest
import torch

from ckptview.core import open_checkpoint
from ckptview.core.errors import Cancelled, CheckpointError, RangesIgnored
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.values.reading import read_values

pytest.importorskip("requests")


@pytest.fixture
def no_ranges(tmp_path):
    from tests.support.remote_server import RangeServer

    torch.manual_seed(0)
    torch.save({"w": torch.randn(1024, 1024), "b": torch.arange(3.0)}, tmp_path / "big.pt")
    server = RangeServer(str(tmp_path), honour_range=False)
    yield f"{server.url}/big.pt", tmp_path / "big.pt"
    server.stop()


def test_the_refusal_says_the_size_and_the_consent_is_one_opens(no_ranges):
    url, local = no_ranges
    with pytest.raises(RangesIgnored) as err:
        open_checkpoint(url)
    assert err.value.size == local.stat().st_size and err.value.url == url
    steps: list[Progress] = []
    ckpt = open_checkpoint(url, ReaderContext(progress=steps.append, remote=RemoteOptions(download=True)))
    try:
        ref = torch.load(local, weights_only=True)
        assert {e.name for e in ckpt.tensors()} == set(ref)
        for entry in ckpt.tensors():  # the whole file, its last bytes too
            assert torch.equal(torch.from_numpy(read_values(entry.info).copy()), ref[entry.name])
    finally:
        ckpt.close()
    assert steps and steps[-1].done == steps[-1].total == local.stat().st_size
    assert all("downloading big.pt" in s.message for s in steps)
    with pytest.raises(RangesIgnored):  # the yes was for that open only
        open_checkpoint(url)


def test_the_command_lines_download_reads_the_whole_copy(no_ranges):
    url, local = no_ranges
    ckpt = open_checkpoint(url, ReaderContext(remote=RemoteOptions(download=True)))  # what --download sets
    try:
        assert ckpt.file_size == local.stat().st_size
        assert {e.name for e in ckpt.tensors()} == {"w", "b"}
    finally:
        ckpt.close()


def test_a_cancel_stops_the_download(no_ranges):
    url, _local = no_ranges
    token = CancelToken()

    def progress(step: Progress) -> None:
        token.cancel()  # at the first piece

    with pytest.raises((Cancelled, CheckpointError)) as err:
        open_checkpoint(url, ReaderContext(cancel=token, progress=progress, remote=RemoteOptions(download=True)))
    assert isinstance(err.value, Cancelled) or "cancel" in str(err.value)
