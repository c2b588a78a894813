"""Zips without their end, made to cost: the walk over local headers is charged to the file's work budget."""

from __future__ import annotations

import struct

import pytest

from ckptview.core import budget as budget_module
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.open import open_checkpoint


def local_header(name: bytes, flags: int = 0x08, size: int = 0) -> bytes:
    return struct.pack("<4sHHHHHLLLHH", b"PK\x03\x04", 20, flags, 0, 0, 0, 0, size, size, len(name), 0) + name


@pytest.fixture
def budgets(monkeypatch):
    made: list[budget_module.Budget] = []
    original = budget_module.Budget.for_stored.__func__

    def recording(cls, stored, subject, **kwargs):
        made.append(original(cls, stored, subject, **kwargs))
        return made[-1]

    monkeypatch.setattr(budget_module.Budget, "for_stored", classmethod(recording))
    return made


def test_a_record_full_of_descriptor_signatures_is_searched_once(tmp_path, budgets):
    """No descriptor fits: every candidate is looked at, within the budget the bytes pay for."""
    path = tmp_path / "flood.pt"
    path.write_bytes(local_header(b"archive/data.pkl") + b"PK\x07\x08" * 250_000)
    with pytest.raises(CheckpointFormatError, match="incomplete download"):
        open_checkpoint(str(path))
    (budget,) = budgets
    size = path.stat().st_size
    assert 0 < budget.spent <= 8 * size  # each byte read about once, each candidate's 24 bytes once


def test_a_chain_of_empty_records_without_data_pkl_is_refused(tmp_path, budgets):
    path = tmp_path / "chain.pt"
    record = local_header(b"x") + struct.pack("<4sLLL", b"PK\x07\x08", 0, 0, 0)
    path.write_bytes(record * 50_000)
    with pytest.raises(CheckpointFormatError, match="no whole data.pkl"):
        open_checkpoint(str(path))
    (budget,) = budgets
    assert budget.spent <= 8 * path.stat().st_size  # each record's bytes read a few times at most
