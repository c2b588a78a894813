"""Turn names from a possibly hostile checkpoint into safe, unique file names and archive keys.

A tensor name may be `../../x`, `/etc/passwd`, hold NUL or control characters, be 300 characters long,
or differ from another only by case (which collides on macOS/Windows file systems). The functions here
never return a name that leaves its folder, and `Deduplicator` never hands out the same name twice.
"""

from __future__ import annotations

import hashlib
import re

# Characters kept as they are in a file name; everything else becomes "_".
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._+=@,-]")
# Windows refuses these device names whatever the extension; harmless elsewhere, so avoid them everywhere.
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
MAX_STEM = 120  # leaves room for a de-duplication suffix and an extension under the usual 255-byte limit


def _digest(name: str) -> str:
    return hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def safe_file_stem(name: str) -> str:
    """A file name stem for `name`: only [A-Za-z0-9._+=@,-], no leading dot, at most MAX_STEM characters."""
    stem = _UNSAFE_FILE_CHARS.sub("_", name)
    # A leading dot would make "." / ".." or a hidden file; keep the rest readable.
    stem = re.sub(r"^\.+", lambda m: "_" * len(m.group()), stem)
    if not stem:
        stem = "_"
    if stem.split(".", 1)[0].lower() in _RESERVED:
        stem = "_" + stem
    if len(stem) > MAX_STEM:
        # A digest of the whole name keeps apart long names that share their first MAX_STEM characters.
        stem = stem[: MAX_STEM - 9] + "-" + _digest(name)
    return stem


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def is_safe_member(name: str) -> bool:
    """True when `name` can be a zip member as it is: relative, no '..', no NUL/control chars/backslash."""
    if not name or len(name) > 200 or name.startswith("/") or "\\" in name:
        return False
    if _CONTROL.search(name):
        return False
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    return not re.match(r"^[A-Za-z]:", name)  # a drive letter is absolute for Windows unzip tools


class Deduplicator:
    """Hands out unique names: the first wins, later ones get `~2`, `~3`... (deterministic in call order).

    With `casefold=True` names differing only by case count as equal (file systems that ignore case).
    """

    def __init__(self, *, casefold: bool = False, reserved: tuple[str, ...] = ()) -> None:
        self._casefold = casefold
        self._used: set[str] = {self._key(r) for r in reserved}

    def _key(self, name: str) -> str:
        return name.casefold() if self._casefold else name

    def take(self, stem: str, suffix: str = "") -> str:
        """The first of `stem+suffix`, `stem~2+suffix`, ... not handed out yet; it is then taken."""
        candidate = stem + suffix
        n = 1
        while self._key(candidate) in self._used:
            n += 1
            candidate = f"{stem}~{n}{suffix}"
        self._used.add(self._key(candidate))
        return candidate
