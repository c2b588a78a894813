"""A plain pickle file (pickle.dump of dicts/lists/numbers), read with the safe VM."""

from __future__ import annotations

import re

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import CheckpointError
from ckptview.core.read.context import DEFAULT, ReaderContext, Source
from ckptview.core.read.formats import torch_legacy
from ckptview.core.read.pickle.stream import (
    PLAIN_FORMAT,
    PickleStream,
    inert_persistent_id,
    stream_checkpoint,
)
from ckptview.core.read.pickle.vm import unpickle

NAME = PLAIN_FORMAT
PRIORITY = 10

# Protocols 0/1 have no header. Besides the usual openings of a pickled dict or list, a GLOBAL
# (`c<module>\n<name>\n`, optionally after a MARK) or a MARK before an INST/OBJ argument is how a
# hand-written payload starts: torch.load(weights_only=False) would run it, so we must read it
# (and report its globals) rather than call it text.
_PROTOCOL0_GLOBAL = re.compile(rb"\(?c[A-Za-z_][\w.]*\n[A-Za-z_][\w.]*\n")
_OPCODES = frozenset(b"(.012FIJKLMNPQRSTUVXabcdeghijlopqrstu}])G" + bytes(range(0x80, 0x99)))
_PROTOCOL0_OPENINGS = (b"(dp0", b"(lp0", b"}q", b"]q", b"(d", b"(l", b"(t", b"(V", b"(S'", b"(I", b"(F",
                       b"(N", b"(((")


def sniff(source: Source) -> bool:
    """True when the source's first bytes look like a plain pickle."""
    head = source.head
    if len(head) >= 2 and head[0] == 0x80 and head[1] <= 5:
        return True
    if head.startswith(_PROTOCOL0_OPENINGS) or _PROTOCOL0_GLOBAL.match(head) is not None:
        return True
    return _opcodes_throughout(source)


def _opcodes_throughout(source: Source) -> bool:
    """True when `head` is a whole pickle, or valid opcodes up to where the head cuts a longer file.

    This catches pickles with any opening (a magic number padded with NONE/POP pairs, written as hex):
    torch.load would run them, so they must be read and their globals reported, not called text.
    """
    head = source.head
    if not head or head[0] not in _OPCODES:
        return False
    try:
        unpickle(head, what="head", persistent_load=inert_persistent_id)
    except CheckpointError as exc:
        # The head ends inside the pickle: valid opcodes all the way. A long text line fails otherwise.
        cut = "no STOP opcode" in str(exc) or "ends inside an opcode" in str(exc)
        try:
            return cut and source.size > len(head)
        except OSError:
            return False
    return True


def open(source: Source, ctx: ReaderContext = DEFAULT) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    """Read a plain pickle into a Checkpoint: metadata only, no tensor bytes, nothing run."""
    path = source.path
    fmap = source.file_map()
    torch_legacy.refuse_tar(fmap)
    stream = PickleStream(fmap.read_all(), budget=ctx.budget_for(source))
    first = stream.read("pickle")
    if torch_legacy.is_magic(first):  # a legacy torch.save whose magic number is written unusually
        return torch_legacy.read_after_magic(path, fmap, stream)
    return stream_checkpoint(path, fmap, stream, first)
