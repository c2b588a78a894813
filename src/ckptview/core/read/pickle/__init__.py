"""The safe pickle VM and what torch's pickles mean: opcodes interpreted, never executed; torch's
rebuild functions emulated; the census of every global a file names; the inert object graph turned into a tree."""

from __future__ import annotations

from ckptview.core.read.pickle.census import PickleCensus, census
from ckptview.core.read.pickle.stream import PickleStream
from ckptview.core.read.pickle.to_tree import build_tree
from ckptview.core.read.pickle.torch_tree import load_torch_pickle, make_checkpoint
from ckptview.core.read.pickle.vm import unpickle

__all__ = ["PickleCensus", "PickleStream", "build_tree", "census", "load_torch_pickle", "make_checkpoint", "unpickle"]
