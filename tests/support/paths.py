"""Where things are, for tests that read the project's own files."""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "ckptview"
DATA = REPO / "tests" / "data"
