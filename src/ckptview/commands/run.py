"""`ckptview run PATH --device DEV ...`: load onto a device and run a test forward pass in a worker process."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from ckptview.commands.failures import error_kind, report
from ckptview.commands.wording import cli_words
from ckptview.core.run import request as runner
from ckptview.core.run.devices import parse_device
from ckptview.core.run.input_specs import InputSpecError, parse_input_specs
from ckptview.core.run.process import RunError
from ckptview.core.run.request import DEFAULT_TIMEOUT, RunRequest
from ckptview.core.run.result import RunResult, result_json_text, result_lines
from ckptview.core.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `run` subcommand."""
    p = sub.add_parser("run", help="load onto a device and run a test forward pass (in a worker process)")
    p.add_argument("path", help="checkpoint: TorchScript, .pt2, a model folder or state dict whose library "
                                "names its architecture (config.json), a state dict with --model, a full pickle")
    p.add_argument("--device", default="cpu", help="cpu, cuda:N, mps, xla:N or meta (default cpu)")
    p.add_argument("--input-shape", metavar="S",
                   help="inputs, ';'-separated: SHAPE[@DTYPE][=FILL], e.g. '2,3,224,224;2@int64=randint:0:10'")
    p.add_argument("--dtype", help="default input dtype (float32; int64 for randint fills)")
    p.add_argument("--fill", help="default fill: normal, zeros, ones, full:V, uniform:LO:HI, randint:LO:HI")
    p.add_argument("--seed", type=int, default=0, help="seed of random fills (default 0)")
    p.add_argument("--input-file", metavar="NPY", help="input values from a .npy (one) or .npz (one per array)")
    p.add_argument("--model", metavar="SPEC", help="model code: package.module:factory or path/file.py:Class "
                                                   "(default: the architecture config.json names, built by its "
                                                   "installed library)")
    p.add_argument("--model-kwargs", metavar="JSON", default="{}", help="keyword arguments for the factory")
    p.add_argument("--trust", action="store_true",
                   help="allow torch to load PATH though it runs code from the file: a TorchScript or .pt2 "
                        "program (and compiled libraries in it), or pickles that name code (a full-model pickle, "
                        "an archive with unsafe records)")
    p.add_argument("--trust-compare", action="store_true",
                   help="the same consent for the --compare file (never implied by --trust)")
    p.add_argument("--strict", action="store_true",
                   help="fail when any weight is missing, unexpected, mismatched or not placed")
    p.add_argument("--allow-missing", action="store_true",
                   help="run a partial load: weights of the model the file lacks stay at their initial values "
                        "(without it such a run fails); every line of the result says so")
    p.add_argument("--runs", type=int, default=10, help="timed runs after warm-up (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    p.add_argument("--compare", metavar="PATH", help="run the same input through a second checkpoint")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds before the worker is killed")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_request(args: argparse.Namespace) -> RunRequest:
    """A RunRequest from parsed arguments; RunError (kind 'input') on a bad argument."""
    try:
        kwargs = json.loads(args.model_kwargs or "{}")
    except ValueError as exc:
        raise RunError(f"--model-kwargs is not JSON: {exc}", kind="input") from None
    if not isinstance(kwargs, dict):
        raise RunError("--model-kwargs must be a JSON object, e.g. '{\"hidden\": 256}'", kind="input")
    try:
        inputs = parse_input_specs(args.input_shape, args.dtype, args.fill) if args.input_shape else None
    except InputSpecError as exc:
        raise RunError(f"--input-shape: {exc}", kind="input") from None
    if args.runs < 1 or args.warmup < 0 or args.timeout <= 0:
        raise RunError("--runs must be >= 1, --warmup >= 0 and --timeout > 0", kind="input")
    return RunRequest(path=args.path, device=parse_device(args.device), model=args.model, model_kwargs=kwargs,
                      trust=args.trust, inputs=inputs, input_file=args.input_file, seed=args.seed,
                      runs=args.runs, warmup=args.warmup, compare_path=args.compare,
                      trust_compare=args.trust_compare, strict=args.strict, allow_missing=args.allow_missing,
                      timeout=args.timeout)


# A file refused (it names code the user has not trusted, or changed since): exit 2, like a hostile file.
REFUSED = ("refused", "changed")


def run(args: argparse.Namespace) -> int:
    """Run the job; print JSON or a summary; errors are one line on stderr, exit 2 when refused, else 1."""
    try:
        result = runner.run(build_request(args), remote=args.remote)
    except RunError as exc:
        report(error_kind(exc), cli_words(exc), args.json)
        return 2 if exc.kind in REFUSED else 1
    for warning in result.warnings:
        print(f"ckptview: warning: {printable(cli_words(warning))}", file=sys.stderr)
    if args.json:
        print(result_json_text(result))
    else:
        print(format_result(result))
    return 0


def format_result(result: RunResult | Mapping[str, Any]) -> str:
    """A short human summary of a run result (or of its JSON form): `result_lines`, escaped."""
    if not isinstance(result, RunResult):
        result = RunResult.from_json(result)
    return "\n".join(map(printable, result_lines(result)))  # names and reasons come from the file
