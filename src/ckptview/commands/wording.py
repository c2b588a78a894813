"""The core's fixes in the command line's words: the flag or the command that does each (`core.message`).

A core message says what went wrong and carries what fixes it as data (`Hint`); here each fix becomes the
option a user types. Every command words its failures and warnings through `cli_words`, so a flag renamed
in a parser is renamed here and nowhere in the core.
"""

from __future__ import annotations

from ckptview.core.message import Fix, worded

__all__ = ["FLAGS", "cli_words"]

# Each fix as the command line says it (a template of the hint's args: paths, an input's name).
FLAGS = {
    Fix.TRUST: "pass --trust to allow",
    Fix.TRUST_COMPARE: "pass --trust-compare to allow",
    Fix.MODEL: "give model code you trust with --model package.module:factory or --model path/to/file.py:Class",
    Fix.MODEL_KWARGS: "give it with --model-kwargs",
    Fix.INPUT_SHAPE: "pass --input-shape, e.g. 2,20",
    Fix.INPUT_NAMED: "give it with --input-shape {0}:SHAPE@DTYPE",
    Fix.ALLOW_MISSING: "--allow-missing runs a partial load anyway",
    Fix.DOWNLOAD: "pass --download to do that",
    Fix.MAX_DOWNLOAD: "pass --max-download SIZE (e.g. 2G) to download at most SIZE",
    Fix.DEADLINE: "--deadline SECONDS or CKPTVIEW_DEADLINE gives a request longer",
    Fix.FORCE: "use --force to overwrite",
    Fix.EXACT_DTYPES: "--exact-dtypes keeps the bits",
    Fix.EXPAND_REPEATS: "--expand-repeats reads the expanded tensor",
    Fix.LEAVE_OUT: "leave it out with --key",
    Fix.NAMES: "see `ckptview info` for the names",
    Fix.OPEN: "`ckptview info {0}` lists it",
    Fix.COMPARE: "`ckptview diff {0} {1}` compares two",
    Fix.SERIES: "`ckptview series {0}` follows them as a training run",
}


def cli_words(said: object) -> str:
    """An error or a warning of the core (a `core.message.Message`, or any text) as the command line says it."""
    return worded(said, FLAGS)
