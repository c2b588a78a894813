"""A plain pickle file (pickle.dump of dicts/lists/numbers), read with the safe VM."""

from __future__ import annotations

import re

from ckptview.core.model import Checkpoint
from ckptview.core.sources import FileMap
from ckptview.core.torch_pickle import load_torch_pickle, make_checkpoint

NAME = "pickle"
PRIORITY = 10

# Protocols 0/1 have no header. Besides the usual openings of a pickled dict or list, a GLOBAL
# (`c<module>\n<name>\n`, optionally after a MARK) or a MARK before an INST/OBJ argument is how a
# hand-written payload starts: torch.load(weights_only=False) would run it, so we must read it
# (and report its globals) rather than call it text.
_PROTOCOL0_GLOBAL = re.compile(rb"\(?c[A-Za-z_][\w.]*\n[A-Za-z_][\w.]*\n")
_PROTOCOL0_OPENINGS = (b"(dp0", b"(lp0", b"}q", b"]q", b"(d", b"(l", b"(t", b"(V", b"(S'", b"(I", b"(F",
                       b"(N", b"(((")


def sniff(path: str, head: bytes) -> bool:
    """True when the path or its first bytes (`head`; b"" for a folder) look like a plain pickle."""
    if len(head) >= 2 and head[0] == 0x80 and head[1] <= 5:
        return True
    return head.startswith(_PROTOCOL0_OPENINGS) or _PROTOCOL0_GLOBAL.match(head) is not None


def open(path: str) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a plain pickle into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    fmap = FileMap(path)
    obj, globals_seen, end = load_torch_pickle(fmap.read_all(), None, what="pickle")
    size = fmap.size
    ckpt = make_checkpoint(path, NAME, size, obj, globals_seen, _file_maps=[fmap])
    if end < size:
        # Like torch.load, the leading bytes decide the format: a pickle followed by a zip (a
        # polyglot) is read as the pickle. Say so, so the appended part is not silently hidden.
        tail = fmap.read(end, 4)
        what = " (a zip archive)" if tail.startswith(b"PK") else ""
        ckpt.warnings.append(f"file continues after the pickle ends: {size - end} more bytes{what} were not read")
    return ckpt
