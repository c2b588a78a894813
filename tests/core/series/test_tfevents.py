"""TensorBoard event files read as data (core/series/tfevents.py): the scalars tensorboard's own reader gives,
written by torch's SummaryWriter (simple values beside histograms, images and text) and as TF2's tensor
scalars (`summary_v2.scalar_pb`, no TensorFlow needed to write them)."""

from __future__ import annotations

import glob
import os
import struct

import numpy as np
import pytest

from ckptview.core.read.bytes.fs import LOCAL
from ckptview.core.series.tfevents import is_event_file, masked_crc32c, read_event_file
from tests.support.logged_runs import event_scalars

pytest.importorskip("tensorboard")


def write_events(folder: str, tensor_scalars: bool = False) -> str:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(folder)
    for step in range(40):
        writer.add_scalar("train/loss", 2.0 / (step + 1), step)
        writer.add_scalar("lr", 0.1 * 0.9 ** step, step)
        if step % 10 == 0:
            writer.add_histogram("weights", np.random.default_rng(step).normal(size=500), step)
            writer.add_image("sample", np.random.default_rng(step).random((3, 16, 16)), step)
            writer.add_text("note", f"step {step}", step)
    if tensor_scalars:
        from tensorboard.plugins.scalar.summary_v2 import scalar_pb

        for step in range(5):
            writer.file_writer.add_summary(scalar_pb("eval/acc", 0.5 + step / 10), step)
    writer.close()
    (path,) = glob.glob(os.path.join(folder, "events.out.tfevents.*"))
    return path


def test_scalars_equal_tensorboards_own_reader(tmp_path) -> None:
    path = write_events(str(tmp_path), tensor_scalars=True)
    assert is_event_file(os.path.basename(path))
    read = read_event_file(path, LOCAL)
    assert read.error is None and not read.partial
    expected = event_scalars(str(tmp_path))
    assert set(read.tags) == set(expected) == {"train/loss", "lr", "eval/acc"}  # no histogram, image or text
    for tag, points in expected.items():
        assert list(zip(read.tags[tag].steps, read.tags[tag].values, strict=True)) == points, tag


def test_the_crc_is_tensorflows(tmp_path) -> None:
    path = write_events(str(tmp_path))
    with open(path, "rb") as fh:
        head = fh.read(12)
    assert masked_crc32c(head[:8]) == struct.unpack("<I", head[8:])[0]


def test_a_record_still_being_written_is_left_for_later(tmp_path) -> None:
    path = write_events(str(tmp_path))
    whole = read_event_file(path, LOCAL)
    with open(path, "rb") as fh:
        data = fh.read()
    cut = tmp_path / "cut" / os.path.basename(path)
    cut.parent.mkdir()
    cut.write_bytes(data[:-7])  # the last record's end not written yet
    read = read_event_file(str(cut), LOCAL)
    assert read.partial and read.error is None and read.records == whole.records - 1
