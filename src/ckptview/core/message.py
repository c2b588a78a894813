"""Messages as data: what went wrong in neutral words, and what the user can do about it as fields.

The core serves two front ends, and a fix is a flag on one (`--trust`) and a button or field on the other
(Run asks; the Model code field). So no core message names either: a `Message` is a `str` (the neutral
sentence: lists of warnings, `str(error)` and `--json` keep working unchanged) that also carries its
`reason` and the `hints` for what fixes it. `commands/wording.py` words the hints as flags and command
lines, `gui/base/wording.py` as the window's buttons and fields; anything else reads the neutral text.
A test (tests/test_architecture.py) fails when a string of the core names a flag or a command.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, NamedTuple

__all__ = ["NEUTRAL", "Fix", "Hint", "Message", "hints_of", "message_of", "reason_of", "rephrased", "worded"]


class Fix(str, Enum):
    """An option of the user's that fixes, or changes, what a message is about."""

    TRUST = "trust"  # run the code the file names (a pickled model, a Lightning class)
    TRUST_COMPARE = "trust_compare"  # the same for the second checkpoint of a comparison
    MODEL = "model"  # give model code (a factory or a class)
    MODEL_KWARGS = "model_kwargs"  # give the model's init arguments
    INPUT_SHAPE = "input_shape"  # give the input's shape
    INPUT_NAMED = "input_named"  # give the input the model takes by a name ckptview cannot make (args: it)
    ALLOW_MISSING = "allow_missing"  # run a partial load anyway
    DOWNLOAD = "download"  # download a file whose server ignores range requests
    MAX_DOWNLOAD = "max_download"  # the most a download of unknown size may fetch
    DEADLINE = "deadline"  # the time a request may take
    FORCE = "force"  # overwrite the files an export would replace
    EXACT_DTYPES = "exact_dtypes"  # keep bfloat16/float8 bits in npy/npz
    EXPAND_REPEATS = "expand_repeats"  # read a view that repeats its storage as the expanded tensor
    LEAVE_OUT = "leave_out"  # narrow the selection of tensors
    NAMES = "names"  # see the tensors' names (args: the file)
    OPEN = "open"  # open one checkpoint (args: its path)
    COMPARE = "compare"  # compare two checkpoints (args: their paths)
    SERIES = "series"  # follow a folder's checkpoints as a training run (args: the folder)


# What `str()` of a message says of each fix: for logs, scripts and anything that is no front end.
NEUTRAL = {
    Fix.TRUST: "trusting the file runs it",
    Fix.TRUST_COMPARE: "trusting the second checkpoint loads it",
    Fix.MODEL: "give model code you trust (package.module:factory or path/to/file.py:Class)",
    Fix.MODEL_KWARGS: "give the model's init arguments",
    Fix.INPUT_SHAPE: "give the input's shape",
    Fix.INPUT_NAMED: "give it as {0}:SHAPE@DTYPE",
    Fix.ALLOW_MISSING: "allowing missing weights runs a partial load anyway",
    Fix.DOWNLOAD: "allow the download to read it",
    Fix.MAX_DOWNLOAD: "give the most a download may fetch",
    Fix.DEADLINE: "a longer deadline waits longer",
    Fix.FORCE: "allow overwriting to replace them",
    Fix.EXACT_DTYPES: "keeping exact dtypes keeps the bits",
    Fix.EXPAND_REPEATS: "ask for it expanded to read it whole",
    Fix.LEAVE_OUT: "leave it out of the selection",
    Fix.NAMES: "the checkpoint's listing names its tensors",
    Fix.OPEN: "open {0}",
    Fix.COMPARE: "compare {0} with {1}",
    Fix.SERIES: "follow {0} as a training run",
}


class Hint(NamedTuple):
    """One fix a message offers, with what it is about (`args`: a path, an input's name)."""

    fix: Fix
    args: tuple[str, ...] = ()


class Message(str):
    """The neutral sentence (this str) of `reason` followed by its `hints`, each worded by `NEUTRAL`."""

    reason: str
    hints: tuple[Hint, ...]

    def __new__(cls, reason: str, *hints: Hint) -> Message:
        self = super().__new__(cls, _sentence(reason, hints, NEUTRAL))
        self.reason, self.hints = reason, tuple(hints)
        return self

    def __reduce__(self) -> tuple[type[Message], tuple[Any, ...]]:  # pickles (to a cluster's workers) whole
        return (Message, (self.reason, *self.hints))

    def map(self, words: Callable[[str], str]) -> Message:
        """The same hints with `words(reason)` as the reason (redaction, whitespace)."""
        return Message(words(self.reason), *self.hints)


def _sentence(reason: str, hints: tuple[Hint, ...], words: Mapping[Fix, str]) -> str:
    """`reason`, then each hint in `words` (a template of the hint's args; an empty one is left out)."""
    said = [words[h.fix].format(*h.args) for h in hints if words[h.fix]]
    advice = ", or ".join([", ".join(said[:-1]), said[-1]] if len(said) > 2 else said)
    return f"{reason}; {advice}" if advice else reason


def worded(said: object, words: Mapping[Fix, str]) -> str:
    """`said` (an error, a Message, any text) in a front end's `words` for its fixes ({Fix: template of the
    hint's args}, every Fix in it): its reason and hints; plain text as it is."""
    text = message_of(said)
    return _sentence(text.reason, text.hints, words) if isinstance(text, Message) else text


def message_of(said: object) -> str:
    """The message of `said` (an error, a Message, any text): a Message when it carries one, else its str."""
    if isinstance(said, BaseException):
        carried = getattr(said, "message", None) or (said.args[0] if len(said.args) == 1 else None)
        if isinstance(carried, Message):
            return carried
    return said if isinstance(said, Message) else str(said)


def reason_of(said: object) -> str:
    """What went wrong, without the fixes: a Message's reason, or the text of anything else."""
    text = message_of(said)
    return text.reason if isinstance(text, Message) else text


def hints_of(said: object) -> tuple[Hint, ...]:
    """The fixes `said` (a Message, or an error made from one) carries; none for plain text."""
    text = message_of(said)
    return text.hints if isinstance(text, Message) else ()


def rephrased(said: object, words: Callable[[str], str]) -> str:
    """`words(reason)` of `said` (an error or a text passed on with more words around it), its hints kept."""
    text = message_of(said)
    return text.map(words) if isinstance(text, Message) else words(text)
