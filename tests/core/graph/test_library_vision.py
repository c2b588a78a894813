"""timm and torchvision architectures get their library's graph: traced on meta in the worker, keys placed.

Run in .venv-vision (`make test-vision`): torchvision must be the build made for the installed torch.
"""

from __future__ import annotations

import importlib
import operator
import os

import pytest
import torch

from ckptview.core.graph import ModelGraph, read_graph
from ckptview.core.graph.cache import GraphCache
from ckptview.core.read.open import open_checkpoint


def _library(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - torchvision built for another torch raises RuntimeError
        if os.environ.get("CKPTVIEW_REQUIRE_VISION"):
            raise
        pytest.skip(f"{name} does not import here ({type(exc).__name__}: {str(exc)[:80]}); "
                    f"`make test-vision` runs these tests in .venv-vision", allow_module_level=True)


torchvision = _library("torchvision")
timm = _library("timm")

pytestmark = pytest.mark.vision


def _ops(model: torch.nn.Module, shape: tuple[int, ...]) -> list[str]:
    with torch.device("meta"):
        model = model.to("meta").eval()
    with torch.no_grad():
        program = torch.export.export(model, (torch.empty(shape, device="meta"),), strict=False)
    return ["getitem" if n.target is operator.getitem else str(n.target)
            for n in program.graph.nodes if n.op == "call_function"]


def _graph(path: str, cache: GraphCache) -> ModelGraph:
    checkpoint = open_checkpoint(path)
    try:
        return read_graph(checkpoint, cache=cache)
    finally:
        checkpoint.close()


def test_a_torchvision_state_dict_recognised_by_its_keys_gets_resnets_graph(tmp_path) -> None:
    model = torchvision.models.resnet18(num_classes=10)
    path = tmp_path / "resnet18.pth"
    torch.save(model.state_dict(), path)
    graph = _graph(str(path), GraphCache(str(tmp_path / "c.sqlite3")))
    assert graph.source == "torchvision:resnet18"
    assert [n.op for n in graph.nodes if n.op not in ("input", "output")] == \
        _ops(torchvision.models.resnet18(num_classes=10), (1, 3, 224, 224))
    keys = set(model.state_dict())
    counters = {k for k in keys if k.endswith("num_batches_tracked")}  # eval: no node reads them
    assert set(graph.placed()) == keys - counters and set(graph.unread) == counters
    assert next(n for n in graph.nodes if n.module == "fc").params == ("fc.weight", "fc.bias")


def test_a_timm_folder_gets_its_graph_at_its_configured_size(tmp_path) -> None:
    args = {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 48, "num_heads": 3}
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, **args)
    folder = tmp_path / "vit"
    timm.models.save_for_hf(model, folder, model_args=args, safe_serialization=True)
    graph = _graph(str(folder), GraphCache(str(tmp_path / "c.sqlite3")))
    assert graph.source == "timm:vit_tiny_patch16_224"
    assert [n.shape for n in graph.nodes if n.op == "input"] == [(1, 3, 32, 32)]
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, **args)
    assert [n.op for n in graph.nodes if n.op not in ("input", "output")] == _ops(reference, (1, 3, 32, 32))
    assert set(graph.placed()) == set(model.state_dict()) and graph.unread == []
