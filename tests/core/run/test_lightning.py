"""Lightning `.ckpt` files run by the LightningModule class they name (LightningCLI's `_class_path`), with the
user's consent, or by the user's own class (`--model`), with init arguments from `hyper_parameters`, as
Lightning's `load_from_checkpoint` builds them; outputs equal to it bit for bit on CPU.

The LightningModule lives in a package written into tmp_path; importing it writes a marker named by the
importing process's id, so a test can tell that no worker imported it. Checkpoints are written by Lightning
itself (`Trainer.save_checkpoint`); the LightningCLI one through the context LightningCLI's instantiator uses
(`_given_hyperparameters_context`), since LightningCLI itself needs jsonargparse, which is not installed here.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import textwrap

import numpy as np
import pytest
import torch

from ckptview import cli
from ckptview.core import open_checkpoint
from ckptview.core.jobs import drain
from ckptview.core.run import request as runner
from ckptview.core.run.lightning import recognize_lightning
from ckptview.core.run.process import RunError, execute
from ckptview.core.worker.forward import output_stats

# Skipped cleanly without lightning; imported by the tests that use it, not when the suite is collected (it
# imports transformers and matplotlib on the way).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")

PACKAGE = "ckvlitpkg"
CLASS_PATH = f"{PACKAGE}.models.Net"
MODELS = textwrap.dedent('''
    import os
    import torch
    import lightning as L

    open(os.path.join(os.environ["CKV_LIT_MARKERS"], str(os.getpid())), "w").close()


    class Net(L.LightningModule):
        def __init__(self, hidden: int = 8, cfg: dict | None = None, scale=1.0):
            super().__init__()
            self.save_hyperparameters()
            self.l1 = torch.nn.Linear(4, hidden)
            self.l2 = torch.nn.Linear(hidden, 3 + len((cfg or {}).get("extra", [])))
            self.scale = float(getattr(scale, "value", scale))

        def forward(self, x):
            return self.l2(torch.tanh(self.l1(x))) * self.scale


    class NsNet(L.LightningModule):
        """Takes one Namespace; Lightning saves it as a dict and names the argument in hparams_name."""

        def __init__(self, hparams):
            super().__init__()
            self.save_hyperparameters(hparams)
            self.l1 = torch.nn.Linear(4, self.hparams.hidden)
            self.example_input_array = torch.zeros(5, 4)

        def forward(self, x):
            return self.l1(x)


    class HookNet(Net):
        """Saved under old names; its on_load_checkpoint renames them, as Lightning lets a module do."""

        def on_save_checkpoint(self, checkpoint):
            checkpoint["state_dict"] = {"old." + k: v for k, v in checkpoint["state_dict"].items()}

        def on_load_checkpoint(self, checkpoint):
            checkpoint["state_dict"] = {k.removeprefix("old."): v for k, v in checkpoint["state_dict"].items()}


    class NotLit(torch.nn.Module):
        def __init__(self, hidden: int = 8, cfg=None, scale=1.0):
            super().__init__()
            self.l1 = torch.nn.Linear(4, hidden)
''')


@pytest.fixture(scope="module")
def lit(tmp_path_factory):
    """The package folder, its marker folder, and the Net class imported here (marker of this process)."""
    root = tmp_path_factory.mktemp("lit")
    (root / PACKAGE).mkdir()
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "models.py").write_text(MODELS)
    markers = root / "markers"
    markers.mkdir()
    old_env = os.environ.get("CKV_LIT_MARKERS")
    os.environ["CKV_LIT_MARKERS"] = str(markers)
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(f"{PACKAGE}.models")
        yield {"root": root, "markers": markers, "module": module}
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        if old_env is None:
            os.environ.pop("CKV_LIT_MARKERS", None)
        else:
            os.environ["CKV_LIT_MARKERS"] = old_env


def _save(model, path) -> str:
    """A checkpoint as Lightning writes it (Trainer.save_checkpoint)."""
    import lightning as L

    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(str(path))
    return str(path)


def _cli_checkpoint(lit, path, class_path=CLASS_PATH, **init) -> str:
    """A checkpoint with the hyper-parameters LightningCLI saves: `_class_path` and `_instantiator` added."""
    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters_context

    torch.manual_seed(3)
    with _given_hyperparameters_context(hparams={"_class_path": class_path, **init},
                                        instantiator="lightning.pytorch.cli.instantiate_module"):
        model = lit["module"].Net(**init)
    return _save(model, path)


def _imported_elsewhere(lit) -> set[str]:
    return {p.name for p in lit["markers"].iterdir()} - {str(os.getpid())}


def run_cli(capsys, *args: str) -> tuple[int, dict | None, str]:
    status = cli.main(["run", *args, "--json", "--runs", "1", "--warmup", "0"])
    out = capsys.readouterr()
    return status, (json.loads(out.out) if status == 0 else None), out.err


def _assert_bit_equal(result: dict, reference: torch.Tensor) -> None:
    (out,) = result["outputs"]
    assert out["shape"] == list(reference.shape)
    assert reference.numel() <= 8  # every value is in "first"
    assert out["first"] == reference.double().reshape(-1).tolist()
    stats = output_stats(reference)
    assert (out["stats"]["mean"], out["stats"]["std"]) == (stats.mean, stats.std)


CFG = {"extra": [1, 2], "nested": {"a": (1, "x"), "b": [0.5, None]}}


@pytest.mark.slow
def test_recognition_reads_the_class_path_and_hyper_parameters_as_data(lit, tmp_path):
    path = _cli_checkpoint(lit, tmp_path / "cli.ckpt", hidden=6, cfg=CFG)
    saved = torch.load(path, weights_only=True)
    assert saved["hyper_parameters"]["_class_path"] == CLASS_PATH  # what Lightning itself wrote
    assert saved["hyper_parameters"]["_instantiator"] == "lightning.pytorch.cli.instantiate_module"
    checkpoint = open_checkpoint(path)
    try:
        found = recognize_lightning(checkpoint, path)
    finally:
        checkpoint.close()
    assert found is not None and found.version == importlib.metadata.version("lightning") and found.class_path == CLASS_PATH
    assert found.hparams_name == saved["hparams_name"] == "kwargs"
    assert found.dropped == ["_class_path", "_instantiator"]
    from ckptview.core.worker.lightning import decode_value

    assert decode_value(found.hparams) == {"hidden": 6, "cfg": CFG}
    assert decode_value(found.hparams)["cfg"]["nested"]["a"] == (1, "x")  # a tuple stays a tuple
    source = runner.classify_source(path)
    assert source.kind == runner.LIGHTNING and source.findings == [CLASS_PATH]
    assert runner.classify_source(path, f"{PACKAGE}.models:Net").findings == []  # the user's class: no consent

    plain = _save(lit["module"].Net(hidden=5), tmp_path / "plain.ckpt")
    checkpoint = open_checkpoint(plain)
    try:
        assert recognize_lightning(checkpoint, plain).class_path is None  # only LightningCLI names the class
    finally:
        checkpoint.close()
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "not.ckpt")
    checkpoint = open_checkpoint(str(tmp_path / "not.ckpt"))
    try:
        assert recognize_lightning(checkpoint, str(tmp_path / "not.ckpt")) is None
    finally:
        checkpoint.close()


@pytest.mark.slow
def test_without_trust_the_class_is_refused_and_never_imported(lit, tmp_path, capsys, monkeypatch):
    path = _cli_checkpoint(lit, tmp_path / "x.ckpt", hidden=6)
    monkeypatch.chdir(lit["root"])  # where the worker would find the package, once trusted
    status, _, err = run_cli(capsys, path)
    assert status == 2
    assert err == (f"ckptview: lightning: x.ckpt names class {CLASS_PATH}; importing it runs code chosen by the "
                   f"file; pass --trust to allow\n")
    assert _imported_elsewhere(lit) == set()

    # The worker's own gate refuses too, when asked without consent (or with consent for another class).
    request = runner.RunRequest(path, inputs=None, runs=1, warmup=0, cwd=str(lit["root"]))
    source = runner.classify_source(path)
    for consent in (None, ["somethingelse.Net"]):
        payload = {**request.to_json(), "op": "run", "source": "lightning", "lightning": source.lightning.payload(),
                   "consent": {"main": consent, "compare": None}}
        with pytest.raises(RunError, match=f"^refusing to import {CLASS_PATH} named by x.ckpt without "
                                           f"trust$") as err:
            drain(execute(payload, 120))
        assert err.value.kind == "refused"
    assert _imported_elsewhere(lit) == set()


@pytest.mark.slow
def test_with_trust_the_outputs_equal_load_from_checkpoint(lit, tmp_path, capsys, monkeypatch):
    path = _cli_checkpoint(lit, tmp_path / "x.ckpt", hidden=6, cfg=CFG, scale=0.5)
    plain = tmp_path / "plain.ckpt"
    saved = torch.load(path, weights_only=True)
    for key in ("_class_path", "_instantiator"):  # the same checkpoint as a plain Trainer writes it
        saved["hyper_parameters"].pop(key)
    torch.save(saved, plain)
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    monkeypatch.chdir(lit["root"])
    status, result, err = run_cli(capsys, path, "--trust", "--input-file", str(tmp_path / "x.npy"))
    assert status == 0, err
    assert result["architecture"] == {"library": "lightning", "class": CLASS_PATH,
                                      "source": "hyper_parameters._class_path"}
    assert result["source"] == "lightning" and result["warnings"] == []
    assert result["load"]["missing"] == [] and result["load"]["tensors"] == 4
    assert _imported_elsewhere(lit)  # the worker imported it, with consent
    # Lightning's own loading path on the same inputs (its instantiator needs jsonargparse: the plain twin).
    reference = lit["module"].Net.load_from_checkpoint(str(plain), map_location="cpu").eval()
    assert dict(reference.hparams) == {"hidden": 6, "cfg": CFG, "scale": 0.5}
    with torch.no_grad():
        _assert_bit_equal(result, reference(torch.from_numpy(x)))

    # The same checkpoint with the user's own class: no consent, init arguments from hyper_parameters.
    status, own, err = run_cli(capsys, str(plain), "--model", f"{PACKAGE}.models:Net",
                               "--input-file", str(tmp_path / "x.npy"))
    assert status == 0, err
    assert own["architecture"] == {"library": "lightning", "class": CLASS_PATH, "source": "--model"}
    assert own["outputs"][0]["first"] == result["outputs"][0]["first"]
    # --model-kwargs override hyper_parameters as load_from_checkpoint's kwargs do.
    status, scaled, err = run_cli(capsys, str(plain), "--model", f"{PACKAGE}.models:Net", "--model-kwargs",
                                  '{"scale": 2.0}', "--input-file", str(tmp_path / "x.npy"))
    assert status == 0, err
    reference = lit["module"].Net.load_from_checkpoint(str(plain), map_location="cpu", scale=2.0).eval()
    with torch.no_grad():
        _assert_bit_equal(scaled, reference(torch.from_numpy(x)))


@pytest.mark.slow
def test_a_namespace_argument_and_its_example_input(lit, tmp_path, capsys, monkeypatch):
    """hparams_name: a class taking one Namespace gets the saved dict under that name, as in Lightning."""
    torch.manual_seed(5)
    path = _save(lit["module"].NsNet(argparse.Namespace(hidden=3, tag="y")), tmp_path / "ns.ckpt")
    monkeypatch.chdir(lit["root"])
    status, result, err = run_cli(capsys, path, "--model", f"{PACKAGE}.models:NsNet")
    assert status == 0, err
    (inp,) = result["inputs"]
    assert inp["shape"] == [5, 4] and inp["origin"] == "example_input_array"
    reference = lit["module"].NsNet.load_from_checkpoint(path, map_location="cpu").eval()
    from ckptview.core.run.input_specs import InputSpec, make_array
    from ckptview.core.worker.forward import to_torch

    spec = InputSpec.from_json({k: inp[k] for k in ("shape", "dtype", "fill", "low", "high")})
    with torch.no_grad():
        out = reference(to_torch(make_array(spec, 0, 0), spec.dtype, "cpu"))
    assert result["outputs"][0]["shape"] == [5, 3]
    assert result["outputs"][0]["first"] == out.double().reshape(-1)[:8].tolist()


@pytest.mark.slow
def test_hyper_parameters_the_safe_reader_cannot_rebuild(lit, tmp_path, capsys, monkeypatch):
    """A Namespace value goes through (rebuilt as one); a tensor value is refused in one line, unless given."""
    monkeypatch.chdir(lit["root"])
    ns = _cli_checkpoint(lit, tmp_path / "ns.ckpt", hidden=4, scale=argparse.Namespace(value=3.0))
    info = open_checkpoint(ns)
    try:
        assert info.unsafe_globals == ["argparse.Namespace"]  # torch would not load it with weights_only
    finally:
        info.close()
    x = np.ones((1, 4), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    status, result, err = run_cli(capsys, ns, "--trust", "--input-file", str(tmp_path / "x.npy"))
    assert status == 0, err
    assert result["load"]["loader"] == "ckptview reader"
    saved = torch.load(ns, weights_only=False)
    saved["hyper_parameters"] = {k: v for k, v in saved["hyper_parameters"].items() if not k.startswith("_")}
    torch.save(saved, tmp_path / "plain.ckpt")
    reference = lit["module"].Net.load_from_checkpoint(str(tmp_path / "plain.ckpt"), map_location="cpu",
                                                      weights_only=False).eval()
    assert reference.scale == 3.0
    with torch.no_grad():
        _assert_bit_equal(result, reference(torch.from_numpy(x)))

    tensor = _cli_checkpoint(lit, tmp_path / "t.ckpt", hidden=4, scale=torch.tensor(2.0))
    status, _, err = run_cli(capsys, tensor, "--trust", "--input-file", str(tmp_path / "x.npy"))
    assert status == 2 and err.count("\n") == 1
    assert ("t.ckpt's hyper_parameters.scale is a tensor, which ckptview does not rebuild as an init argument "
            "of Net (scale); give it with --model-kwargs") in err
    status, _, err = run_cli(capsys, tensor, "--trust", "--model-kwargs", '{"scale": 2.0}',
                             "--input-file", str(tmp_path / "x.npy"))
    assert status == 0, err


@pytest.mark.slow
def test_meta_builds_shapes_only(lit, tmp_path, capsys, monkeypatch):
    path = _cli_checkpoint(lit, tmp_path / "x.ckpt", hidden=6)
    monkeypatch.chdir(lit["root"])
    status, result, err = run_cli(capsys, path, "--trust", "--device", "meta", "--input-shape", "2,4")
    assert status == 0, err
    assert result["load"]["bytes_moved"] == 0 and result["load"]["tensors"] == 4
    (out,) = result["outputs"]
    assert out["shape"] == [2, 3] and out["device"] == "meta" and out["stats"] is None


@pytest.mark.slow
def test_what_is_not_a_lightning_module_or_names_no_class_is_refused(lit, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(lit["root"])
    path = _cli_checkpoint(lit, tmp_path / "x.ckpt", class_path=f"{PACKAGE}.models.NotLit", hidden=6)
    status, _, err = run_cli(capsys, path, "--trust", "--input-shape", "2,4")
    assert status == 2 and err.count("\n") == 1
    assert f"lightning: {PACKAGE}.models.NotLit named by x.ckpt is not a LightningModule subclass" in err
    bad = _cli_checkpoint(lit, tmp_path / "bad.ckpt", class_path="os.system; rm", hidden=6)
    status, _, err = run_cli(capsys, bad, "--trust")
    assert status == 2 and "is not a dotted class name: 'os.system; rm'" in err
    plain = _save(lit["module"].Net(hidden=5), tmp_path / "plain.ckpt")
    status, _, err = run_cli(capsys, plain)
    assert status == 2 and err.count("\n") == 1
    assert "names no LightningModule class (only LightningCLI writes one, in hyper_parameters._class_path" in err
    assert "give model code you trust with --model" in err


@pytest.mark.slow
def test_on_load_checkpoint_sees_the_checkpoint_before_its_weights_load(lit, tmp_path, capsys, monkeypatch):
    torch.manual_seed(7)
    path = _save(lit["module"].HookNet(hidden=3), tmp_path / "hook.ckpt")
    assert all(k.startswith("old.") for k in torch.load(path, weights_only=True)["state_dict"])
    x = np.full((1, 4), 0.25, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    monkeypatch.chdir(lit["root"])
    status, result, err = run_cli(capsys, path, "--model", f"{PACKAGE}.models:HookNet", "--input-file",
                                  str(tmp_path / "x.npy"))
    assert status == 0, err
    assert result["load"]["missing"] == [] and result["load"]["unexpected"] == []
    reference = lit["module"].HookNet.load_from_checkpoint(path, map_location="cpu").eval()
    with torch.no_grad():
        _assert_bit_equal(result, reference(torch.from_numpy(x)))


def test_hyper_parameters_past_a_bound_are_refused_in_one_line(tmp_path, capsys):
    from ckptview.core.run.lightning import MAX_VALUES

    torch.save({"pytorch-lightning_version": "2.6.6", "state_dict": {"w": torch.zeros(2)},
                "hyper_parameters": {"many": list(range(MAX_VALUES))}}, tmp_path / "big.ckpt")
    status, _, err = run_cli(capsys, str(tmp_path / "big.ckpt"), "--model", "nosuch:Net")
    assert status == 2 and err == ("ckptview: lightning: big.ckpt's hyper_parameters hold more values than the "
                                   "100,000 ckptview passes as a model's init arguments\n")
