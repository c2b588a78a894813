"""Text from a file, made safe to print: control characters never reach a terminal raw."""

from __future__ import annotations

from typing import Any

# What str.isprintable() refuses is escaped: C0/C1 controls, DEL, format characters (bidi overrides and
# isolates, zero-width marks), line/paragraph separators, unassigned code points. Letters of every script
# stay readable. Tab is escaped too: it would shift table columns.


def _escape_char(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def elide(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, the middle replaced by an ellipsis (head and tail kept).

    A string from a file may be megabytes long (a tensor name, a metadata value); what shows it to a
    person (an error line, a label, a tree row) needs a bounded piece, and cutting first keeps escaping,
    layout and drawing bounded too.
    """
    if len(text) <= limit:
        return text
    marker = f"\u2026[{len(text) - limit:,} more characters]\u2026"
    keep = max(limit - len(marker), 2)
    head = keep - keep // 3
    return text[:head] + marker + text[len(text) - (keep - head):]


def printable(text: object) -> str:
    """`text` as str with every non-printable character written as an escape (`\\x1b`, `\\n`, `\\u202e`).

    The result holds no control byte, so it cannot move the cursor, retitle the terminal, forge table
    rows or reorder text; a backslash is left as it is (the escapes are for people, not for parsing).
    """
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escape_char(c) for c in s)


# The longest text from a file the window hands to Qt in one piece. Qt lays out a string whole (column
# widths, label sizes, tooltips): a 90 MB tensor name stopped the event loop for 95 s. Names of real
# tensors are under 300 characters.
SHOWN_CHARS = 1000


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """Text from a file as the window shows it: elided to `limit` characters, then escaped by `printable`."""
    return printable(elide(text if isinstance(text, str) else str(text), limit))


def short_repr(value: Any, limit: int = 80) -> str:
    """A one-line repr cut to `limit` characters."""
    if isinstance(value, str | bytes) and len(value) > 4 * limit:  # a 90 MB value: cut before repr and split
        value = value[: 4 * limit]
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
