"""Fuzzing: mutated valid checkpoints of every format open or raise CheckpointError, never anything
else, never a hang, never unbounded memory. Derandomized and bounded for CI; benchmarks/fuzz.py runs long."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support import corpus, fuzzing

FORMATS = ("torch-zip", "torch-legacy", "torchscript", "safetensors", "pickle")
_counter = itertools.count()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> tuple[dict[str, bytes], Path]:
    refs = corpus.shared("reference", tmp_path_factory)
    return {fmt: path.read_bytes() for fmt, path in refs.items()}, tmp_path_factory.mktemp("fuzz")


def test_seeds_open_cleanly(seeds):
    data, folder = seeds
    for fmt, raw in data.items():
        path = folder / f"seed-{fmt}"
        path.write_bytes(raw)
        assert fuzzing.exercise(path) == "opened", fmt


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=fuzzing.mutations)
def test_mutated_files_open_or_raise_checkpoint_error(seeds, fmt, ops):
    data, folder = seeds
    raw = fuzzing.mutate(data[fmt], ops)
    path = folder / f"{fmt}-{next(_counter)}"
    path.write_bytes(raw)
    try:
        fuzzing.exercise_bounded(path)
    finally:
        path.unlink()


@pytest.mark.parametrize("fmt", ["torch-zip", "torchscript"])
@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=fuzzing.mutations)
def test_mutated_data_pkl_with_valid_crc(seeds, fmt, ops):
    data, folder = seeds
    path = folder / f"{fmt}-pkl-{next(_counter)}"
    corpus.raw_zip(path, fuzzing.mutate_member(data[fmt], "/data.pkl", ops))
    try:
        fuzzing.exercise_bounded(path)
    finally:
        path.unlink()
