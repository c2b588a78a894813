"""No load the gate did not check: config fields that a library turns into a path, a URL or a load (issue 34,
finding 6, and the lead on the meta-device build's class check).

A transformers `TimmWrapper` folder whose config.json set `model_args.checkpoint_path` made `ckptview run
FOLDER` (no --model, no --trust) load a file of the config's choosing, which the gate never read: transformers
passes `model_args` to `timm.create_model`. The same holds for every field a library reads as a location: a
`backbone` fetched or read from a path, an `attn_implementation` naming a kernel on the Hub, a
`quantization_config`, `auto_map` at any depth, timm's `local-dir:`/`hf-hub:` names and `pretrained_cfg`
locations. The builds are checked on the config as data (`core/run/config_guard`), and what a build opens is
guarded in the worker (`core/worker/build_guard`). The timm cases run in the vision venv
(test_config_loads_vision.py).

The lead: the meta-device build that names a Trainer folder's optimizer state admitted any class with "For"
in its name (`RoFormerTokenizer`, `JsonPipelineDataFormat`) and called it with the config.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import warnings

import pytest

from tests.hostile.config_loads import edit_config, outside_files, traced

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny BertForMaskedLM saved by transformers itself (config.json + model.safetensors)."""
    import torch

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=60, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)
    folder = tmp_path_factory.mktemp("bert") / "bert"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.BertForMaskedLM(config).save_pretrained(folder)
    return folder


# Each: (case, how the config changes given the outside folder and payload, a word the refusal names).
HOSTILE = [
    ("quantization", lambda c, o, p: c.update(quantization_config={"quant_method": "bitsandbytes", "load_in_8bit": True}),
     "quantization_config"),
    ("auto_map", lambda c, o, p: c.update(auto_map={"AutoModel": "modeling_x.X"}), "auto_map"),
    ("nested_auto_map", lambda c, o, p: c.update(text_config={"model_type": "bert", "auto_map": {"AutoModel": "m.X"}}),
     "auto_map"),
    ("remote_code", lambda c, o, p: c.update(trust_remote_code=True), "trust_remote_code"),
    ("backbone_path", lambda c, o, p: c.update(backbone=str(o), use_timm_backbone=False), "backbone"),
    ("backbone_repo", lambda c, o, p: c.update(backbone="someone/backbone", use_timm_backbone=False), "backbone"),
    ("hub_kernel", lambda c, o, p: c.update(attn_implementation="kernels-community/flash-attn"), "attn_implementation"),
    ("model_args_path", lambda c, o, p: c.update(model_args={"checkpoint_path": str(p)}), "checkpoint_path"),
    ("timm_local_dir", lambda c, o, p: c.update(architecture=f"local-dir:{o}"), "architecture"),
    ("pretrained_cfg_file", lambda c, o, p: c.update(pretrained_cfg={"file": str(p)}), "file"),
    ("custom_generate", lambda c, o, p: c.update(custom_generate="someone/generate"), "custom_generate"),
    ("any_path", lambda c, o, p: c.update(vocab_file=str(p)), "vocab_file"),
    ("url", lambda c, o, p: c.update(weights_url="https://example.invalid/w.pth"), "weights_url"),
    ("class_path", lambda c, o, p: c.update(tokenizer_class="evil.module.Tokenizer"), "tokenizer_class"),
]


COMMANDS = {"run": ["run", "{f}", "--device", "cpu", "--runs", "1", "--warmup", "0"], "graph": ["graph", "{f}"]}
# The cases whose field names a file or folder run as a process of their own under strace (what it and its
# workers open is watched); the others run the same command in this process (a second each, not ten).
TRACED = {"backbone_path", "model_args_path", "timm_local_dir", "pretrained_cfg_file", "any_path"}


def in_process(argv: list[str], capsys) -> tuple:
    """(status, stderr, None, stdout) of `ckptview ARGV` run by the command line's own `main` here."""
    from ckptview.cli import main

    capsys.readouterr()
    status = main(argv)
    out, err = capsys.readouterr()
    return status, err, None, out


@pytest.mark.slow
@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("case", "change", "named"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_config_that_names_a_load_is_refused_in_one_line(bert, tmp_path, capsys, case, change, named, command):
    """`ckptview run FOLDER` and `ckptview graph FOLDER` (which builds the architecture on meta in the worker)
    with a hostile config: exit 2, one line naming the field, the payload never runs, and nothing in the
    outside folder is opened (traced with strace where the machine has it)."""
    outside, payload, marker = outside_files(tmp_path)
    folder = edit_config(bert, tmp_path / "model", lambda c: change(c, outside, payload))
    argv = [a.replace("{f}", str(folder)) for a in COMMANDS[command]]
    if case in TRACED:
        status, err, opened, out = traced(argv, outside, with_stdout=True)
    else:
        status, err, opened, out = in_process(argv, capsys)
    if command == "graph":  # no library build: a graph inferred from the names, the refusal its first note
        notes = [line for line in out.splitlines() if line.strip().startswith("note:")]
        assert status == 0 and named in notes[0], (out[-2000:], err[-2000:])
        assert all("inferred from the key names" in n for n in notes[1:]) and len(notes) <= 2
        assert ("graph from inferred" in out or "graph from module-tree" in out) and "Traceback" not in err
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == 2 and len(lines) == 1, err[-2000:]
        assert named in lines[0] and "Traceback" not in err
    assert not marker.exists()
    assert opened in (None, []), opened


def test_pinned_fields_never_reach_the_build():
    """Where a config came from, which kernels to use and a pretrained backbone are the library's defaults."""
    from ckptview.core.run.config_guard import guarded_config

    config = {"model_type": "bert", "architectures": ["BertModel"], "_name_or_path": "/elsewhere/model",
              "attn_implementation": "sdpa", "_attn_implementation_internal": "eager", "use_pretrained_backbone": True,
              "text_config": {"model_type": "bert", "_name_or_path": "org/repo", "use_pretrained_backbone": True}}
    out = guarded_config("transformers", "BertModel", config)
    assert "_name_or_path" not in out and "attn_implementation" not in out
    assert "_attn_implementation_internal" not in out and "_name_or_path" not in out["text_config"]
    assert out["use_pretrained_backbone"] is False and out["text_config"]["use_pretrained_backbone"] is False
    assert config["_name_or_path"] == "/elsewhere/model"  # the caller's dict is left as it was


@pytest.mark.slow
def test_every_default_config_of_the_library_is_allowed():
    """An allowlist that refused real models would be useless: every config class transformers registers,
    as its defaults and as `save_pretrained` writes it, passes the guard (diffusers' models too)."""
    import inspect

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from ckptview.core.run.config_guard import ConfigRefused, guarded_config

    refused, checked = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import logging

        logging.getLogger("transformers").setLevel(logging.ERROR)
        for model_type in list(CONFIG_MAPPING.keys()):
            try:
                saved = json.loads(CONFIG_MAPPING[model_type]().to_json_string())
            except Exception:  # noqa: BLE001, S112 - a config class that needs arguments: not a default to check
                continue
            saved["_name_or_path"] = f"someone/{model_type}"  # as a folder saved from the Hub has it
            checked += 1
            try:
                guarded_config("transformers", "X", saved)
            except ConfigRefused as exc:
                refused.append((model_type, str(exc)))
        diffusers = pytest.importorskip("diffusers")
        for name in dir(diffusers):
            cls = getattr(diffusers, name, None)
            if not (isinstance(cls, type) and issubclass(cls, diffusers.ModelMixin)):
                continue
            params = {k: list(v.default) if isinstance(v.default, tuple) else v.default
                      for k, v in inspect.signature(cls.__init__).parameters.items()
                      if isinstance(v.default, (str, int, float, bool, tuple, list, type(None)))}
            checked += 1
            try:
                guarded_config("diffusers", name, {"_class_name": name, "_diffusers_version": "0.42.1", **params})
            except ConfigRefused as exc:
                refused.append((name, str(exc)))
    assert checked > 500 and not refused, refused[:10]


@pytest.mark.slow
def test_model_classes_come_from_the_library_s_registries(transformers_unimported):
    """The lead: the class check admitted anything with "For" in its name; now only the values of
    transformers' own auto-model registries, read from its source without importing it."""
    from ckptview.core.inspect import hf_order

    names = hf_order.model_classes()
    assert "transformers" not in sys.modules  # read as data
    for not_a_model in ("RoFormerTokenizer", "JsonPipelineDataFormat", "ForcedBOSTokenLogitsProcessor",
                        "TextGenerationPipeline", "Formatter"):
        assert not_a_model not in names
    import transformers as fresh  # imported again here: the module-level one was taken out of sys.modules
    from transformers.models.auto import modeling_auto

    registry = set()
    for attr in dir(modeling_auto):
        if attr.startswith("MODEL") and attr.endswith("_MAPPING_NAMES"):
            for value in getattr(modeling_auto, attr).values():
                registry.update([value] if isinstance(value, str) else value)
    assert names == registry
    assert all(issubclass(getattr(fresh, n), fresh.PreTrainedModel)
               for n in ("BertForMaskedLM", "GPT2LMHeadModel", "CLIPModel"))


@pytest.mark.parametrize("cls", ["RoFormerTokenizer", "JsonPipelineDataFormat", "BertTokenizerFast"])
def test_the_meta_build_never_calls_a_class_that_is_not_a_model(bert, tmp_path, monkeypatch, cls):
    from ckptview.core.inspect import hf_order

    folder = edit_config(bert, tmp_path / "trainer", lambda c: c.update(architectures=[cls]))

    def no_child(*args, **kwargs):
        raise AssertionError("the child was started for a class that is not a model")

    monkeypatch.setattr(subprocess, "run", no_child)
    assert hf_order.architecture(str(folder)) is None
    assert hf_order.parameter_order(str(folder)) is None


@pytest.mark.parametrize(("case", "change", "named"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_the_meta_build_of_a_trainer_folder_gets_the_same_guard(bert, tmp_path, monkeypatch, case, change, named):
    """The child that names a Trainer folder's optimizer state never starts for a config that names a load."""
    from ckptview.core.inspect import hf_order

    outside, payload, _marker = outside_files(tmp_path)
    folder = edit_config(bert, tmp_path / "trainer", lambda c: change(c, outside, payload))
    started = []
    monkeypatch.setattr(hf_order, "_build", lambda *a: started.append(a) or None)
    assert hf_order.parameter_order(str(folder)) is None
    assert started == []


@pytest.mark.slow
def test_the_meta_build_still_names_a_real_model_s_parameters(bert):
    import torch

    from ckptview.core.inspect import hf_order

    names = hf_order.parameter_order(str(bert))
    config = transformers.BertConfig.from_pretrained(bert)
    with torch.device("meta"):
        want = [n for n, _ in transformers.BertForMaskedLM(config).named_parameters()]
    assert names == want


def test_what_a_build_opens_is_guarded(tmp_path):
    """The worker's second line: while a library builds, files outside the installed Python, sockets and
    processes are refused, even when the library catches the error and goes on."""
    from ckptview.core.run.protocol import WorkerError
    from ckptview.core.worker.build_guard import guarded_build

    outside = tmp_path / "secret.pth"
    outside.write_bytes(b"x")
    with guarded_build() as guard:
        with pytest.raises(PermissionError):
            open(outside, "rb")  # noqa: SIM115
        with pytest.raises(PermissionError):
            os.open(str(outside), os.O_RDONLY)
        with pytest.raises(PermissionError), socket.socket() as sock:
            sock.connect(("127.0.0.1", 9))
        with pytest.raises(PermissionError):
            subprocess.run(["true"], check=False)
        with contextlib.suppress(OSError):
            open(outside, "rb")  # noqa: SIM115 - swallowed by the "library": still recorded
        import json as json_module  # the library itself still imports and reads its own files

        assert json_module.dumps([1]) == "[1]"
        with open(os.devnull, "rb"):
            pass
    with pytest.raises(WorkerError, match="tried to open .*secret.pth"):
        guard.check("transformers X")
    with open(outside, "rb") as fh:  # outside a build, nothing is guarded
        assert fh.read() == b"x"


UNCHECKED = [h for h in HOSTILE if h[0] in ("quantization", "backbone_path", "hub_kernel", "model_args_path",
                                           "nested_auto_map")]  # a worker each: a few of every kind


@pytest.mark.slow
@pytest.mark.parametrize(("case", "change", "named"), UNCHECKED, ids=[h[0] for h in UNCHECKED])
def test_the_graph_worker_refuses_a_config_that_was_never_checked(bert, tmp_path, case, change, named):
    """The worker's graph op builds with the run's builder: a request whose config skipped the parent's check
    (another caller, a cached request) is refused in the worker itself, in one line, before any build."""
    from ckptview.core.jobs import drain
    from ckptview.core.run.process import RunError, execute

    outside, payload, marker = outside_files(tmp_path)
    config = json.loads((bert / "config.json").read_text())
    change(config, outside, payload)
    request = {"op": "graph", "architecture": {"library": "transformers", "class": "BertForMaskedLM",
                                                "source": "config.json", "config": config},
               "inputs": [{"name": "input_ids", "shape": [1, 4], "dtype": "int64"}], "dtype": None}
    with pytest.raises(RunError) as err:
        drain(execute(request, 300))
    assert err.value.kind == "refused" and "\n" not in str(err.value), str(err.value)
    assert not marker.exists()


LIGHTNING_MODELS = '''
import torch
import lightning as L


class Loads(L.LightningModule):
    """A class the user trusts by name, whose hyper-parameter names a file its __init__ loads."""

    def __init__(self, init_from: str = "", hidden: int = 4):
        super().__init__()
        self.save_hyperparameters()
        self.l1 = torch.nn.Linear(4, hidden)
        if init_from:
            self.load_state_dict(torch.load(init_from, weights_only=False), strict=False)

    def forward(self, x):
        return self.l1(x)
'''


@pytest.mark.slow
def test_a_trusted_lightning_class_cannot_load_what_its_hyper_parameters_name(tmp_path, capsys, monkeypatch):
    """--trust consents to the class the checkpoint names, not to what its hyper-parameters make __init__ open:
    a file elsewhere (here a pickle that runs code under weights_only=False) is refused in one line."""
    pytest.importorskip("lightning")
    import torch
    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters_context

    from ckptview.cli import main

    root = tmp_path / "project"
    (root / "trusted_pkg").mkdir(parents=True)
    (root / "trusted_pkg" / "__init__.py").write_text("")
    (root / "trusted_pkg" / "models.py").write_text(LIGHTNING_MODELS)
    outside, payload, marker = outside_files(tmp_path)
    monkeypatch.syspath_prepend(str(root))
    import importlib

    module = importlib.import_module("trusted_pkg.models")
    class_path = "trusted_pkg.models.Loads"
    try:
        with _given_hyperparameters_context(hparams={"_class_path": class_path, "init_from": str(payload)},
                                            instantiator="lightning.pytorch.cli.instantiate_module"):
            model = module.Loads()  # built here without loading; the checkpoint's hparams name the payload
        model.hparams["init_from"] = str(payload)
        path = tmp_path / "model.ckpt"
        torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                    "pytorch-lightning_version": "2.5.0"}, path)
        monkeypatch.chdir(root)  # where the worker finds the trusted package
        status = main(["run", str(path), "--trust", "--input-shape", "2,4", "--runs", "1", "--warmup", "0"])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert status == 2 and len(lines) == 1, err[-2000:]
        assert "weights.pth" in lines[0] and "refused" in lines[0], lines[0]
        assert not marker.exists()
    finally:
        for name in [n for n in sys.modules if n.startswith("trusted_pkg")]:
            del sys.modules[name]


def test_a_tokenizer_linked_from_elsewhere_is_not_read(tmp_path):
    """The next-token line reads the folder's own tokenizer.json: a link to a file outside is never opened."""
    from ckptview.core.worker.library import _folder_file

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tokenizer.json").write_text("{}")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").symlink_to(outside / "tokenizer.json")
    assert _folder_file(str(folder / "tokenizer.json"), 1 << 20) is None
    (folder / "own.json").write_text("{}")
    assert _folder_file(str(folder / "own.json"), 1 << 20) == "{}"
