"""A bounded run of the work fuzzer (issue 43): random TorchScript code, `.pt2` program JSON and JSON configs,
each through `graph` / `info` in a child under rlimits, in CPU time and peak memory proportional to the bytes
it holds (tests/support/work_fuzzing.py says how). Derandomized; benchmarks/fuzz.py --work runs it long."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from tests.support import work_fuzzing

pytestmark = pytest.mark.slow
_counter = itertools.count()
_SETTINGS = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                            HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_work")


def _run(kind: str, drawn: object, folder: Path) -> None:
    path, commands = work_fuzzing.build(kind, drawn, folder, f"{kind}-{next(_counter)}")
    for command in commands:
        work_fuzzing.check(path, command)


@_SETTINGS
@given(code=work_fuzzing.script_codes())
def test_random_torchscript_code_costs_what_its_bytes_pay_for(folder: Path, code: str) -> None:
    _run("torchscript", code, folder)


@_SETTINGS
@given(mutations=work_fuzzing.program_mutations)
def test_random_program_json_costs_what_its_bytes_pay_for(folder: Path, mutations: list) -> None:
    _run("program", mutations, folder)


@_SETTINGS
@given(shape=work_fuzzing.config_shapes)
def test_random_configs_cost_what_their_bytes_pay_for(folder: Path, shape: tuple) -> None:
    _run("config", shape, folder)
