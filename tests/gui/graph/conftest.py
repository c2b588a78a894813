"""The Graph view tests' checkpoint: a state dict with the keys of a synthetic Llama program, and the program
given as its graph (the graph's sources are the core's; these tests are of the window)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.support.graphs import llama_keys, llama_program
from tests.support.graphview import LAYERS


@pytest.fixture
def graph_caches():
    """The graph cache each graph job of `llama_file` was handed (the window's, it should be)."""
    return []


@pytest.fixture
def llama_file(tmp_path, monkeypatch, graph_caches):
    """A state dict holding the keys of a 2-layer synthetic Llama program, and that program as its graph."""
    torch.manual_seed(0)
    tensors = {key: torch.randn(4) if key.endswith("norm.weight") or "inv_freq" in key else torch.randn(6, 4)
               for key in llama_keys(LAYERS)}
    tensors["model.layers.1.mlp.up_proj.weight"][0, 0] = math.nan
    tensors["extra.scale"] = torch.ones(2)  # a key no node reads
    path = tmp_path / "llama.pth"
    torch.save(tensors, path)
    graph = llama_program(LAYERS)
    graph.unread.append("extra.scale")

    def job(checkpoint, token=None, cache=None):
        graph_caches.append(cache)
        yield from ()
        return graph

    monkeypatch.setattr("ckptview.core.graph.adapter.graph_job", job)
    return str(path), tensors
