"""A longer fuzz run than the test suite's: mutate valid checkpoints of every format and check that
ckptview opens them or raises CheckpointError, in bounded time and memory.

    python benchmarks/fuzz.py [--examples 2000] [--formats torch-zip,pickle] [--seed N] [--keep DIR]

Random (not derandomized) unless --seed is given; failing inputs are shrunk by hypothesis and, with
--keep, written to DIR for a regression test.
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

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from tests.support import corpus, fuzzing  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer and print per-format outcomes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="examples per format")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="write failing inputs here")
    args = parser.parse_args(argv)
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
