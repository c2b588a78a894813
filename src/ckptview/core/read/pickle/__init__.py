"""The safe pickle VM and what torch's pickles mean: opcodes interpreted, never executed; torch's
rebuild functions emulated; the census of every global a file names; the inert object graph turned into a tree."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.read.pickle.census import PickleCensus, census
    from ckptview.core.read.pickle.stream import PickleStream
    from ckptview.core.read.pickle.to_tree import build_tree
    from ckptview.core.read.pickle.torch_tree import load_torch_pickle, make_checkpoint
    from ckptview.core.read.pickle.vm import unpickle

__all__ = ["PickleCensus", "PickleStream", "build_tree", "census", "load_torch_pickle", "make_checkpoint", "unpickle"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "census": ["PickleCensus", "census"],
    "stream": ["PickleStream"],
    "to_tree": ["build_tree"],
    "torch_tree": ["load_torch_pickle", "make_checkpoint"],
    "vm": ["unpickle"],
})
