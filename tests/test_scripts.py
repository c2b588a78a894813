"""The scripts beside the code name what exists: a test file a script runs has not moved away under it."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import REPO


def test_the_gpu_script_runs_test_files_that_exist() -> None:
    """benchmarks/gpu_check.sh is the one prepared run for a lent GPU machine: a test path it names that
    moved would collect nothing there, and that session's minutes would be spent finding out."""
    script = (REPO / "benchmarks" / "gpu_check.sh").read_text()
    named = set(re.findall(r"tests/[\w/]+\.py", script))
    assert named, "the script runs no test file"
    assert sorted(p for p in named if not (REPO / p).is_file()) == []


@pytest.mark.slow  # three pytest collections in child processes
def test_the_gpu_script_selects_tests_in_each_file_it_names() -> None:
    """Each of the script's pytest lines collects tests here (with its -k filter), not only names a file."""
    import shlex
    import subprocess
    import sys

    script = (REPO / "benchmarks" / "gpu_check.sh").read_text().replace("\\\n", " ")
    for line in re.findall(r"-m pytest ([^|\n]+)", script):
        args = [a for a in shlex.split(line) if not a.startswith("$") and ">" not in a]
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-qq", *args], cwd=REPO,
                             capture_output=True, text=True)
        per_file = dict(re.findall(r"^(tests/\S+\.py): (\d+)$", out.stdout, re.M))  # -qq: "path: count"
        skipped = set(re.findall(r"SKIPPED \[\d+\] (tests/\S+\.py):\d+", out.stdout))  # a module skipped here
        named = [a for a in args if a.endswith(".py") and a not in skipped]  # (torchvision) runs on its machine
        assert sorted(per_file) == sorted(named) and all(int(n) > 0 for n in per_file.values()), (line, out.stdout)
