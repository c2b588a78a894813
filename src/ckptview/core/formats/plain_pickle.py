"""A plain pickle file (pickle.dump of dicts/lists/numbers), read with the safe VM."""

from __future__ import annotations

import os

from ckptview.core.model import Checkpoint
from ckptview.core.sources import FileMap
from ckptview.core.torch_pickle import load_torch_pickle, make_checkpoint

NAME = "pickle"
PRIORITY = 10


def sniff(path: str, head: bytes) -> bool:
    if len(head) >= 2 and head[0] == 0x80 and head[1] <= 5:
        return True
    # Protocols 0/1 have no header: accept the usual openings of a pickled dict, list or object.
    return head.startswith((b"(dp0", b"(lp0", b"}q", b"]q", b"(d", b"(l", b"ccopy_reg", b"c__builtin__",
                            b"ccollections", b"ctorch"))


def open(path: str) -> Checkpoint:  # noqa: A001 - the reader protocol's name
    fmap = FileMap(path)
    obj, globals_seen, _ = load_torch_pickle(fmap.view(), None, what="pickle")
    return make_checkpoint(path, NAME, os.path.getsize(path), obj, globals_seen, _file_maps=[fmap])
