"""A config declares the work (issue 43, findings 9 and 10): the architecture a config.json names is held
against the checkpoint beside it before anything is built at the size it declares, and its nesting is checked
while its bytes are scanned, before anything copies or walks it.

Before: a 234-byte config declaring 20,000 Llama layers beside a one-tensor file made `run` and `graph` build
and trace all of it (the worker's limit is 900 s); `intermediate_size` 2e9 asked for 128 GB before anything
compared it with the file; a config nested 900 deep ended `run` and `graph` in "internal error:
RecursionError" and the window printed "panel 'Run' failed to build" and a traceback.

The folders are written by transformers' own `save_pretrained` (tiny Llama, GPT-2, BERT) and edited.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import pytest

from tests.hostile.config_loads import edit_config
from tests.support.declared_configs import MODELS, WORDS, block_workers, hostile, one_tensor, save_models

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    return save_models(tmp_path_factory.mktemp("declares"))


@pytest.fixture
def no_worker(monkeypatch) -> None:
    block_workers(monkeypatch)


def main(argv: list[str], capsys) -> tuple[int, str, str]:
    from ckptview.cli import main as cli_main

    capsys.readouterr()
    status = cli_main(argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("case", ["layers", "size", "deep"])
@pytest.mark.parametrize("model", list(MODELS))
def test_run_refuses_a_config_that_does_not_describe_its_file_in_one_line(saved, tmp_path, capsys, no_worker,
                                                                         model, case):
    folder = hostile(saved, tmp_path, model, case)
    status, _, err = main(["run", str(folder), "--device", "cpu", "--runs", "1", "--warmup", "0"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err[-2000:]
    assert WORDS[case] in lines[0] and "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("case", ["layers", "size", "deep"])
@pytest.mark.parametrize("model", list(MODELS))
def test_graph_draws_from_the_keys_naming_the_refusal(saved, tmp_path, capsys, no_worker, model, case):
    """The graph falls back to what the keys alone say (the inferred diagram, or the module tree where the keys
    name no known block), and its first note, the only one naming the config, says why."""
    folder = hostile(saved, tmp_path, model, case)
    status, out, err = main(["graph", str(folder)], capsys)
    notes = [line for line in out.splitlines() if line.strip().startswith("note:")]
    assert status == 0 and ("graph from inferred" in out or "graph from module-tree" in out), out[-2000:]
    assert notes and WORDS[case] in notes[0] and "Traceback" not in err, (out[-2000:], err[-2000:])
    assert not [note for note in notes[1:] if "config.json" in note], notes


@pytest.mark.parametrize("case", ["layers", "size", "deep"])
def test_the_parameter_order_child_never_starts_for_them(saved, tmp_path, monkeypatch, case):
    from ckptview.core.inspect import hf_order
    from ckptview.core.run.declared_sizes import Listing
    from ckptview.core.run.state_dict import state_dict_tensors

    folder = hostile(saved, tmp_path, "llama", case)
    listing = Listing.of_tensors(state_dict_tensors(str(folder)))
    started: list = []
    monkeypatch.setattr(hf_order, "_build", lambda *a: started.append(a) or ["x"])
    assert hf_order.parameter_order(str(folder), listing) is None
    assert started == []
    honest = Listing.of_tensors(state_dict_tensors(str(saved["llama"])))
    assert hf_order.parameter_order(str(saved["llama"]), honest) == ["x"]  # the same folder, honest: built


def test_every_default_config_of_the_library_fits_a_tiny_file():
    """The parent's check never refuses a real config: every config class transformers registers, as its
    defaults declare it, fits even a 21-tensor file of 65,536 elements (a real file of it is far larger)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from ckptview.core.run.config_guard import ConfigRefused
    from ckptview.core.run.declared_sizes import Listing, check_declared

    refused, checked = [], 0
    logging.getLogger("transformers").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model_type in list(CONFIG_MAPPING.keys()):
            try:
                saved = json.loads(CONFIG_MAPPING[model_type]().to_json_string())
            except Exception:  # noqa: BLE001, S112 - a config class that needs arguments
                continue
            checked += 1
            try:
                check_declared(saved, Listing(21, 1 << 16))
            except ConfigRefused as exc:
                refused.append((model_type, str(exc)))
    assert checked > 500 and not refused, refused[:10]


# --- the worker's own check: what the library builds, on meta, bounded as it registers ----------------------


def _arch(folder: Path, cls: str) -> dict:
    from ckptview.core.run.config_guard import guarded_config

    config = json.loads((folder / "config.json").read_text())
    return {"library": "transformers", "class": cls, "config": guarded_config("transformers", cls, config)}


def test_the_worker_stops_a_build_at_the_first_registration_past_the_file(saved, tmp_path):
    """A request that skipped the parent's check (another caller): the meta build stops as soon as it has
    registered more than the file pays for, long before 20,000 layers; one line, kind 'refused'."""
    from safetensors.torch import load_file
    from torch.nn.modules import module as torch_module

    from ckptview.core.run.declared_sizes import Listing
    from ckptview.core.run.protocol import WorkerError
    from ckptview.core.worker.library import build

    folder = one_tensor(saved["llama"], tmp_path / "l", lambda c: c.update(num_hidden_layers=20_000))
    listing = Listing.of(t.shape for t in load_file(str(folder / "model.safetensors")).values())
    layers: list[str] = []
    handle = torch_module.register_module_module_registration_hook(
        lambda _m, name, sub: layers.append(name) if type(sub).__name__ == "LlamaDecoderLayer" else None)
    try:
        with pytest.raises(WorkerError) as caught:
            build(_arch(folder, "LlamaForCausalLM"), "cpu", None, listing)
    finally:
        handle.remove()
    assert caught.value.kind == "refused" and "\n" not in str(caught.value)
    assert "larger model than the checkpoint holds" in str(caught.value)
    assert len(layers) < 200, len(layers)  # stopped within a few hundred registrations, not 20,000 layers


def test_the_worker_refuses_sizes_under_the_parent_s_floor_before_allocating(saved, tmp_path):
    """Sizes the parent lets through (each under its floor) whose product is large: built on meta only, and
    refused by elements, never allocated on the CPU."""
    from safetensors.torch import load_file

    from ckptview.core.run.declared_sizes import Listing, check_declared
    from ckptview.core.run.protocol import WorkerError
    from ckptview.core.worker.library import build

    folder = edit_config(saved["llama"], tmp_path / "mid",
                         lambda c: c.update(hidden_size=1024, intermediate_size=500_000, num_hidden_layers=40))
    listing = Listing.of(t.shape for t in load_file(str(folder / "model.safetensors")).values())
    arch = _arch(folder, "LlamaForCausalLM")
    check_declared(arch["config"], listing)  # the parent lets it through
    allocated: list[int] = []

    def registered(_module, _name, value):  # every parameter and buffer a build registers, on whatever device
        if value is not None and not value.is_meta:
            allocated.append(value.numel())

    from torch.nn.modules import module as torch_module

    handles = [torch_module.register_module_parameter_registration_hook(registered),
               torch_module.register_module_buffer_registration_hook(registered)]
    try:
        with pytest.raises(WorkerError, match="elements of parameters and buffers") as caught:
            build(arch, "cpu", None, listing)
    finally:
        for handle in handles:
            handle.remove()
    assert caught.value.kind == "refused"
    assert sum(allocated) < listing.max_elements, sum(allocated)


def test_a_partial_or_renamed_file_still_builds(saved, tmp_path):
    """Held against the file by shape, with room for what a library converts while loading: a file that lacks
    a few tensors, or names them otherwise, is built (and the library's load report says the rest)."""
    from safetensors.torch import load_file

    from ckptview.core.run.declared_sizes import Listing
    from ckptview.core.worker.library import build

    state = load_file(str(saved["llama"] / "model.safetensors"))
    partial = Listing.of(t.shape for k, t in state.items() if "layers.1." not in k)
    model = build(_arch(saved["llama"], "LlamaForCausalLM"), "meta", None, partial)
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.slow
def test_the_graph_worker_refuses_it_in_one_line(saved, tmp_path):
    """The same through a worker process: the graph request carries the file's listing (`expect`)."""
    from safetensors.torch import load_file

    from ckptview.core.jobs import drain
    from ckptview.core.run.declared_sizes import Listing
    from ckptview.core.run.process import RunError, execute

    folder = edit_config(saved["llama"], tmp_path / "mid",
                         lambda c: c.update(hidden_size=1024, intermediate_size=500_000, num_hidden_layers=40))
    listing = Listing.of(t.shape for t in load_file(str(folder / "model.safetensors")).values())
    request = {"op": "graph", "architecture": _arch(folder, "LlamaForCausalLM") | {"source": "config.json"},
               "inputs": [{"name": "input_ids", "shape": [1, 4], "dtype": "int64"}], "dtype": None,
               "expect": listing.to_json()}
    with pytest.raises(RunError) as caught:
        drain(execute(request, 600))
    assert caught.value.kind == "refused" and "\n" not in str(caught.value), str(caught.value)
