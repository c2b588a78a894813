"""Text from a file, made safe to print: control characters never reach a terminal raw."""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the Unicode line/paragraph separators and bidi overrides that can forge or
# hide output on a terminal. Tab is escaped too: it would shift table columns.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """`text` as str with every control character written as an escape (`\\x1b`, `\\n`, `\\u202e`)."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape, s)
