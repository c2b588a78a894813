"""An HF Trainer / accelerate folder whose model is a safetensors file: the file stores names sorted, so
the model's parameter order is not in it. A name the order decides is marked guessed in every view,
never shown as a confident wrong name (issue 25, finding 4)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from ckptview.cli import main
from ckptview.core.compare.sections import optimizer_labels
from ckptview.core.inspect.optimizer import find_optimizers, state_labels
from ckptview.core.read.open import open_checkpoint
from tests.support.trainer_folders import write_bert_trainer


class SelfAttention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)


class Output(nn.Module):
    def __init__(self, d_in: int, d: int) -> None:
        super().__init__()
        self.dense = nn.Linear(d_in, d)
        self.LayerNorm = nn.LayerNorm(d)


class Attention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.self = SelfAttention(d)
        self.output = Output(d, d)


class Layer(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.attention = Attention(d)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(d, 4 * d)
        self.output = Output(4 * d, d)


class BertLike(nn.Module):
    """BERT's module names and definition order (query before key before value), plain torch."""

    def __init__(self, d: int = 8, layers: int = 2) -> None:
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(30, d)
        self.embeddings.position_embeddings = nn.Embedding(16, d)
        self.embeddings.token_type_embeddings = nn.Embedding(2, d)
        self.embeddings.LayerNorm = nn.LayerNorm(d)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(Layer(d) for _ in range(layers))
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(d, d)


def _trainer_folder(tmp_path, optimizer_file: str = "optimizer.pt"):
    torch.manual_seed(0)
    model = BertLike()
    named = list(model.named_parameters())
    decay = [p for n, p in named if "bias" not in n and "LayerNorm" not in n]
    no_decay = [p for n, p in named if "bias" in n or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}])
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    by_id = {id(p): n for n, p in named}
    truth = [by_id[id(p)] for g in opt.param_groups for p in g["params"]]
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    save_file(model.state_dict(), str(folder / "model.safetensors"))
    torch.save(opt.state_dict(), folder / optimizer_file)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    return folder, truth


@pytest.mark.parametrize("optimizer_file", ["optimizer.pt", "optimizer.bin"])
def test_no_confident_wrong_name(tmp_path, optimizer_file) -> None:
    folder, truth = _trainer_folder(tmp_path, optimizer_file)
    ckpt = open_checkpoint(str(folder))
    try:
        (found,) = find_optimizers(ckpt)
        assert found.mapping == "guessed", found.note
        assert "guessed" in found.note
        sure = [(p.name, truth[p.index]) for p in found.params if not p.guessed]
        assert sure and all(name == right for name, right in sure)  # what is not marked is right
        guessed = [p for p in found.params if p.guessed]
        assert any(p.name != truth[p.index] for p in guessed)  # the guess is wrong somewhere: marked
        # The window's tree and the diff's rows say so too.
        labels = state_labels(ckpt)
        for p in guessed:
            assert labels[id(p.node)].endswith("(guessed)")
        diff_labels, _ = optimizer_labels(ckpt)
        exp_avg = guessed[0].entry("exp_avg")
        assert diff_labels[id(exp_avg.tensor)] == f"exp_avg of {guessed[0].name} (guessed)"
    finally:
        ckpt.close()


def test_info_prints_the_mapping_note_and_flags(tmp_path, capsys) -> None:
    folder, truth = _trainer_folder(tmp_path)
    assert main(["info", str(folder), "--json"]) == 0
    (opt,) = json.loads(capsys.readouterr().out)["optimizers"]
    assert opt["mapping"] == "guessed" and "guessed" in opt["note"]
    for i, p in enumerate(opt["params"]):
        assert p["name_guessed"] or p["name"] == truth[i]
    assert any(p["name_guessed"] for p in opt["params"])
    assert main(["info", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "(guessed)" in out and opt["note"] in out




@pytest.fixture(scope="module")
def bert_trainer(tmp_path_factory):
    """A Trainer-style folder written by transformers itself (model.safetensors, config.json) and torch
    (optimizer.pt), made in a child process: transformers is never imported here."""
    folder = tmp_path_factory.mktemp("trainer") / "checkpoint-2"
    return folder, write_bert_trainer(folder)


def _no_build(monkeypatch) -> list:
    """Fail the test if a model is built (the child started) from here on; the calls it would have made."""
    from ckptview.core.inspect import hf_order

    started: list = []

    def refuse(*args):
        started.append(args)
        raise AssertionError("a model was built to list the checkpoint")

    monkeypatch.setattr(hf_order, "_build", refuse)
    return started


@pytest.mark.slow
def test_installed_transformers_tells_the_order(bert_trainer, tmp_path, transformers_unimported) -> None:
    """With transformers installed, the model config.json names is built on the meta device (in a child
    process, once: `ParamOrderCache.learn`) and its named_parameters() order names every parameter for sure.
    transformers is never imported in this process (the folder is made by a child too)."""
    import sys

    from ckptview.core.inspect.optimizer import pending_orders
    from ckptview.core.inspect.order_cache import ParamOrderCache

    folder, truth = bert_trainer
    cache = ParamOrderCache(str(tmp_path / "orders.sqlite3"))
    ckpt = open_checkpoint(str(folder))
    try:
        (request,) = pending_orders(ckpt, cache)
        assert request.arch == "BertForSequenceClassification" and request.library.startswith("transformers ")
        assert cache.learn([request]) == 1
        (found,) = find_optimizers(ckpt, cache)
    finally:
        ckpt.close()
    assert found.mapping in ("exact", "by-order"), found.note
    assert "BertForSequenceClassification" in found.note and found.order_pending is None
    assert not any(p.guessed for p in found.params)
    assert [p.name for p in found.params] == truth
    assert "transformers" not in sys.modules


@pytest.mark.parametrize("opened", ["folder", "optimizer.pt"])
def test_listing_a_trainer_optimizer_never_builds_a_model(bert_trainer, tmp_path, monkeypatch, opened) -> None:
    """Listing costs what the metadata costs: the folder, or its optimizer.pt alone (named by the model beside
    it), lists with the names marked guessed and the order pending, and no model is built to list it."""
    from ckptview.core.inspect.order_cache import ParamOrderCache

    folder, truth = bert_trainer
    started = _no_build(monkeypatch)
    cache = ParamOrderCache(str(tmp_path / "orders.sqlite3"))  # empty: nothing learned yet
    ckpt = open_checkpoint(str(folder if opened == "folder" else folder / "optimizer.pt"))
    try:
        (found,) = find_optimizers(ckpt, cache)
        labels = state_labels(ckpt, cache)
    finally:
        ckpt.close()
    assert started == []
    assert found.order_pending is not None and found.order_pending.arch == "BertForSequenceClassification"
    assert found.mapping == "guessed"
    for p in found.params:  # every name it is sure of is right; the others say they are guessed
        assert p.guessed or p.name == truth[p.index]
        if p.guessed and p.node is not None:
            assert labels[id(p.node)].endswith("(guessed)")


def test_an_order_learned_once_is_read_back_by_config_and_library_version(bert_trainer, tmp_path,
                                                                          monkeypatch) -> None:
    """The order depends on the model class, its config and the library's version, never on the folder: a
    copy of the checkpoint elsewhere is named from the cache without a build; a changed config or another
    transformers version is asked again."""
    import dataclasses
    import shutil

    from ckptview.core.inspect.hf_order import order_request
    from ckptview.core.inspect.order_cache import ParamOrderCache

    folder, truth = bert_trainer
    path = str(tmp_path / "orders.sqlite3")
    first = ParamOrderCache(path)
    first.learn([order_request(str(folder))])
    first.close()
    copy = tmp_path / "elsewhere" / "checkpoint-2"
    shutil.copytree(folder, copy)
    started = _no_build(monkeypatch)
    cache = ParamOrderCache(path)  # another process's view of the same file
    ckpt = open_checkpoint(str(copy / "optimizer.pt"))
    try:
        (found,) = find_optimizers(ckpt, cache)
    finally:
        ckpt.close()
    assert started == [] and found.order_pending is None
    assert [p.name for p in found.params] == truth and not any(p.guessed for p in found.params)
    request = order_request(str(copy))
    other = dataclasses.replace(request, library="transformers 0.0.1", key="")
    assert order_request(str(folder)).key == request.key
    config = json.loads((copy / "config.json").read_text())
    config["hidden_dropout_prob"] = 0.25
    (copy / "config.json").write_text(json.dumps(config))
    assert order_request(str(copy)).key != request.key and cache.known(order_request(str(copy))) is None
    assert cache.known(dataclasses.replace(other, key="x" * 40)) is None


def test_info_learns_the_order_once_then_lists_at_metadata_cost(bert_trainer, tmp_path, monkeypatch,
                                                               capsys) -> None:
    """The command line decides to wait: its first `info` of a config builds the model once (the names it
    prints are sure), and every later one reads the user's cache and builds nothing."""
    from ckptview.core.inspect import hf_order

    folder, truth = bert_trainer
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = []
    real = hf_order._build
    monkeypatch.setattr(hf_order, "_build", lambda *a: built.append(a[0]) or real(*a))
    for _ in range(2):
        assert main(["info", "--json", str(folder / "optimizer.pt")]) == 0
        (opt,) = json.loads(capsys.readouterr().out)["optimizers"]
        assert [p["name"] for p in opt["params"]] == truth and not any(p["name_guessed"] for p in opt["params"])
    assert built == ["BertForSequenceClassification"]  # once, for both
    assert (tmp_path / "cache" / "ckptview").is_dir()
