"""The core's fixes in the window's words: the button, field or dialog that does each (`core.message`).

A core message says what went wrong and carries what fixes it as data (`Hint`); the command line words a
fix as its flag (`commands/wording.py`), the window as the control a user clicks. Every panel, page and
dialog shows the core's errors and warnings through `window_text`, so no flag reaches the window. The
phrases go through Qt's translation (`QCoreApplication.translate`, context "Fix"), like the window's
other visible text would.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication

from ckptview.core.message import Fix, worded

__all__ = ["CONTROLS", "window_text"]

# Each fix as the window does it (a template of the hint's args; empty: the page offers a button for it).
CONTROLS = {
    Fix.TRUST: "Run asks whether you trust the file",
    Fix.TRUST_COMPARE: "Run asks whether you trust the Compare with file",
    Fix.MODEL: "give model code in the Model code field (package.module:factory or path/to/file.py:ClassName, "
               "or Browse… for a .py file)",
    Fix.MODEL_KWARGS: "give it in the Arguments field",
    Fix.INPUT_SHAPE: "fill the Input field, e.g. 2,20",
    Fix.INPUT_NAMED: "give it in the Input field as {0}:SHAPE@DTYPE",
    Fix.ALLOW_MISSING: "Allow missing weights runs a partial load anyway",
    Fix.DOWNLOAD: "the window offers to download it",
    Fix.MAX_DOWNLOAD: "the window offers to download at most a set size",
    Fix.DEADLINE: "",
    Fix.FORCE: "Export asks before replacing them",
    Fix.EXACT_DTYPES: "“Keep exact bfloat16/float8 bits” keeps them",
    Fix.EXPAND_REPEATS: "the box for tensors that repeat their storage reads it expanded",
    Fix.LEAVE_OUT: "leave it out of the selection",
    Fix.NAMES: "",
    Fix.OPEN: "open {0} to see it",
    Fix.COMPARE: "compare {0} with {1}",
    Fix.SERIES: "File > Open Series… follows them as a training run",
}


def window_text(said: object) -> str:
    """An error or a warning of the core (a `core.message.Message`, or any text) as the window says it."""
    return worded(said, {fix: QCoreApplication.translate("Fix", words) if words else "" for fix, words in
                         CONTROLS.items()})
