"""A longer fuzz run than the test suite's: mutate valid checkpoints of every format and check that
ckptview opens them or raises CheckpointError, in bounded time and memory.

    python benchmarks/fuzz.py [--examples 2000] [--formats torch-zip,pickle] [--seed N] [--keep DIR]
    python benchmarks/fuzz.py --work [--examples 200] [--kinds torchscript,program,config] [--seed N] [--keep DIR]

Random (not derandomized) unless --seed is given; failing inputs are shrunk by hypothesis and, with
--keep, written to DIR for a regression test.

`--work` fuzzes the work a file declares (issue 43): random TorchScript code, `.pt2` program JSON and JSON
configs (tests/support/work_fuzzing.py), each through `ckptview graph` / `info` in a child process under
RLIMIT_CPU and RLIMIT_AS, its CPU seconds and peak memory checked against the bytes it holds (a minute and
1 GiB per MB, plus a floor). Each example costs a child process (a second or more).
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository, for tests.support

import shutil  # noqa: E402

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from tests.support import corpus, fuzzing, work_fuzzing  # noqa: E402

FORMATS = ("torch-zip", "torch-legacy", "torchscript", "safetensors", "pickle", "torch-zip:data.pkl",
           "torchscript:data.pkl")


def run_format(fmt: str, raw: bytes, folder: Path, examples: int, rng_seed: int | None,
               keep: Path | None) -> collections.Counter:
    """Fuzz one format; returns outcome counts; raises on the first property violation (shrunk)."""
    counts: collections.Counter = collections.Counter()
    peak = [0]

    @settings(max_examples=examples, deadline=10_000, database=None,
              suppress_health_check=list(HealthCheck))
    @given(ops=fuzzing.mutations)
    def check(ops: list) -> None:
        path = folder / f"{fmt}.bin"
        if fmt.endswith(":data.pkl"):  # mutate the pickle inside the zip, CRC kept valid
            corpus.raw_zip(path, fuzzing.mutate_member(raw, "/data.pkl", ops))
            data = path.read_bytes()
        else:
            data = fuzzing.mutate(raw, ops)
            path.write_bytes(data)
        try:
            outcome, traced = fuzzing.exercise_bounded(path)
        except BaseException:
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{fmt}-failure.bin").write_bytes(data)
            raise
        counts[outcome] += 1
        peak[0] = max(peak[0], traced)

    if rng_seed is not None:
        check = seed(rng_seed)(check)
    check()
    counts["peak_traced_kb"] = peak[0] >> 10
    return counts


def run_work(kind: str, folder: Path, examples: int, rng_seed: int | None, keep: Path | None) -> collections.Counter:
    """Fuzz the work of one kind of input; returns outcome counts and the largest CPU and memory seen."""
    counts: collections.Counter = collections.Counter()
    strategy = {"torchscript": work_fuzzing.script_codes(), "program": work_fuzzing.program_mutations,
                "config": work_fuzzing.config_shapes}[kind]

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(drawn=strategy)
    def check(drawn: object) -> None:
        name = f"{kind}-{counts['examples']}"
        counts["examples"] += 1
        path, commands = work_fuzzing.build(kind, drawn, folder, name)
        try:
            for command in commands:
                outcome = work_fuzzing.check(path, command)
                counts["drawn" if outcome.status == 0 else "refused"] += 1
                counts["max_cpu_ms"] = max(counts["max_cpu_ms"], int(outcome.cpu * 1000))
                counts["max_peak_mb"] = max(counts["max_peak_mb"], outcome.peak >> 20)
        except BaseException:
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                target = keep / Path(path).name
                (shutil.copytree if Path(path).is_dir() else shutil.copy)(path, target)
            raise
        finally:
            if Path(path).is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                Path(path).unlink(missing_ok=True)

    if rng_seed is not None:
        check = seed(rng_seed)(check)
    check()
    return counts


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer and print per-format outcomes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="examples per format")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--work", action="store_true", help="fuzz the work files declare (child processes)")
    parser.add_argument("--kinds", default=",".join(work_fuzzing.KINDS), help="with --work: the kinds of input")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="write failing inputs here")
    args = parser.parse_args(argv)
    if args.work:
        with tempfile.TemporaryDirectory(prefix="ckptview-fuzz-work-") as tmp:
            for kind in args.kinds.split(","):
                start = time.monotonic()
                counts = run_work(kind, Path(tmp), args.examples, args.seed, args.keep)
                print(f"{kind:12s} {counts['examples']} examples in {time.monotonic() - start:6.1f} s: drawn "
                      f"{counts['drawn']}, refused {counts['refused']}, largest {counts['max_cpu_ms'] / 1000:.1f} s "
                      f"CPU and {counts['max_peak_mb']} MiB", flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="ckptview-fuzz-") as tmp:
        folder = Path(tmp)
        refs = corpus.make_reference(folder / "reference")
        for fmt in args.formats.split(","):
            start = time.monotonic()
            counts = run_format(fmt, refs[fmt.split(":")[0]].read_bytes(), folder, args.examples, args.seed, args.keep)
            elapsed = time.monotonic() - start
            print(f"{fmt:14s} {args.examples} examples in {elapsed:6.1f} s: opened {counts['opened']}, "
                  f"refused {counts['refused']}, peak traced {counts['peak_traced_kb']} KB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
