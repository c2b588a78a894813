"""timm and torchvision checkpoints run with no code of the user's own, as their library loads them.

A timm folder as timm writes it (`save_for_hf`: config.json with `architecture`, `num_classes`,
`pretrained_cfg`, `model_args`), and a torchvision ResNet's state dict (a `.pth` with no config, recognised by
its keys and shapes): `ckptview run PATH --json` with no `--model` names the architecture, makes an image of
the configured size, and gives the outputs of the library's own loading path bit for bit on CPU.

These need torchvision built for the installed torch, which the main venv cannot have (PyPI's torchvision does
not import beside its CPU torch, and breaks transformers' imports with it): `make test-vision` runs them in
.venv-vision (constraints-vision.txt). Elsewhere the module is skipped, with that reason.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib

import numpy as np
import pytest
import torch

from ckptview import cli
from ckptview.core.run.result import InputReport
from ckptview.core.worker.forward import first_values, output_stats
from tests.support.library_matrix import remade_inputs


def _library(name: str):
    """The library, or a skip naming why (not installed, or a build that does not import beside this torch)."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - torchvision built for another torch raises RuntimeError
        if os.environ.get("CKPTVIEW_REQUIRE_VISION"):  # `make test-vision`: a skip there would hide a broken venv
            raise
        pytest.skip(f"{name} does not import here ({type(exc).__name__}: {str(exc)[:80]}); "
                    f"`make test-vision` runs these tests in .venv-vision", allow_module_level=True)


torchvision = _library("torchvision")
timm = _library("timm")

pytestmark = pytest.mark.vision


def run_json(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, dict | None, str]:
    status = cli.main(["run", *args, "--json", "--runs", "1", "--warmup", "0"])
    out = capsys.readouterr()
    return status, (json.loads(out.out) if status == 0 else None), out.err


def assert_same_output(result: dict, reference: torch.Tensor) -> None:
    """The one output's shape, float64 statistics and first values equal the reference's: bit-equal tensors
    give equal figures; one value off by one ulp changes the mean or a first value."""
    (output,) = result["outputs"]
    assert output["shape"] == list(reference.shape)
    stats = output_stats(reference)
    for key in ("mean", "std", "min", "max"):
        assert output["stats"][key] == getattr(stats, key), key
    assert output["first"] == first_values(reference, 8)


def reference_input(result: dict) -> torch.Tensor:
    """The image the run says it made (its spec, seed 0), made again here as a CPU tensor."""
    (image,) = remade_inputs([InputReport.from_json(i) for i in result["inputs"]]).values()
    return image


@pytest.fixture(scope="module")
def timm_resnet(tmp_path_factory) -> str:
    """resnet10t with a 7-class head, saved as the Hub holds timm models: model.safetensors + config.json."""
    torch.manual_seed(0)
    model = timm.create_model("resnet10t", pretrained=False, num_classes=7)
    _randomize_norms(model)
    folder = tmp_path_factory.mktemp("timm") / "resnet10t"
    timm.models.save_for_hf(model, folder, safe_serialization=True)
    return str(folder)


@pytest.fixture(scope="module")
def timm_vit(tmp_path_factory) -> str:
    """A tiny ViT whose size lives in `model_args` (32x32 images, 2 blocks), as pytorch_model.bin."""
    torch.manual_seed(1)
    args = {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 48, "num_heads": 3}
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, **args)
    folder = tmp_path_factory.mktemp("timm") / "vit"
    timm.models.save_for_hf(model, folder, model_args=args, safe_serialization=False)
    return str(folder)


@pytest.fixture(scope="module")
def torchvision_resnet(tmp_path_factory) -> str:
    """torchvision's resnet18 with a 10-class head: its state dict alone, in a .pth (no config beside it)."""
    torch.manual_seed(2)
    model = torchvision.models.resnet18(num_classes=10)
    _randomize_norms(model)
    path = tmp_path_factory.mktemp("torchvision") / "resnet18.pth"
    torch.save(model.state_dict(), path)
    return str(path)


def _randomize_norms(model: torch.nn.Module) -> None:
    """Batch-norm statistics away from their initial 0/1, so that a buffer left unloaded shows."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)


def test_timm_folder_runs_as_timm_loads_it(timm_resnet, capsys):
    from safetensors.torch import load_file

    status, result, err = run_json(capsys, timm_resnet)
    assert status == 0, err
    assert result["architecture"] == {"library": "timm", "class": "resnet10t", "source": "config.json"}
    assert result["source"] == "library"
    # The image of the configured size (pretrained_cfg.input_size), passed as timm's forward names it.
    assert [(i["name"], i["shape"]) for i in result["inputs"]] == [("x", [1, 3, 176, 176])]
    assert result["inputs"][0]["origin"] == "input_size from timm's resolve_model_data_config (its pretrained_cfg)"
    assert result["warnings"] == [] and result["load"]["missing"] == [] and result["load"]["unexpected"] == []

    # timm's own path for a folder: the model from its config.json, then load_state_dict.
    reference = timm.create_model(f"local-dir:{timm_resnet}", pretrained=False).eval()
    reference.load_state_dict(load_file(f"{timm_resnet}/model.safetensors"))
    with torch.no_grad():
        expected = reference(reference_input(result))
    assert expected.shape == (1, 7)
    assert_same_output(result, expected)


def test_timm_model_args_size_the_model_and_its_input(timm_vit, capsys):
    status, result, err = run_json(capsys, timm_vit)
    assert status == 0, err
    assert result["architecture"] == {"library": "timm", "class": "vit_tiny_patch16_224", "source": "config.json"}
    # pretrained_cfg still says 224 (timm does not rewrite it); the model is built for model_args' 32.
    assert [i["shape"] for i in result["inputs"]] == [[1, 3, 32, 32]]
    assert result["warnings"] == [] and result["load"]["missing"] == [] and result["load"]["mismatched"] == []

    reference = timm.create_model(f"local-dir:{timm_vit}", pretrained=False).eval()
    reference.load_state_dict(torch.load(f"{timm_vit}/pytorch_model.bin", weights_only=True))
    with torch.no_grad():
        expected = reference(reference_input(result))
    assert_same_output(result, expected)


def test_torchvision_state_dict_runs_as_torchvision_loads_it(torchvision_resnet, capsys):
    status, result, err = run_json(capsys, torchvision_resnet)
    assert status == 0, err
    assert result["architecture"] == {"library": "torchvision", "class": "resnet18", "source": "keys and shapes"}
    assert [i["shape"] for i in result["inputs"]] == [[1, 3, 224, 224]]
    assert result["warnings"] == [] and result["load"]["missing"] == [] and result["load"]["unexpected"] == []

    reference = torchvision.models.resnet18(num_classes=10).eval()
    reference.load_state_dict(torch.load(torchvision_resnet, weights_only=True))
    with torch.no_grad():
        expected = reference(reference_input(result))
    assert_same_output(result, expected)


def test_an_input_file_goes_in_by_name(timm_resnet, tmp_path, capsys):
    image = np.random.default_rng(3).standard_normal((2, 3, 64, 64)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=image)
    status, result, err = run_json(capsys, timm_resnet, "--input-file", str(tmp_path / "x.npz"))
    assert status == 0, err
    reference = timm.create_model(f"local-dir:{timm_resnet}", pretrained=False).eval()
    from safetensors.torch import load_file

    reference.load_state_dict(load_file(f"{timm_resnet}/model.safetensors"))
    with torch.no_grad():
        expected = reference(torch.from_numpy(image))
    assert_same_output(result, expected)


@pytest.mark.parametrize("which", ["timm_resnet", "torchvision_resnet"])
def test_meta_gives_shapes_and_reads_no_weights(which, request, capsys):
    path = request.getfixturevalue(which)
    status, result, err = run_json(capsys, path, "--device", "meta")
    assert status == 0, err
    assert result["load"]["bytes_moved"] == 0
    (output,) = result["outputs"]
    assert output["shape"] == ([1, 7] if which == "timm_resnet" else [1, 10])
    assert output["device"] == "meta" and output["stats"] is None and output["first"] is None


def test_model_args_never_reach_create_model_s_own_loading_arguments(timm_resnet, tmp_path, capsys):
    """timm passes model_args to the model's constructor, after create_model took its own arguments; a config
    whose model_args name `checkpoint_path` (torch.load of a file the config names) or `pretrained` (a
    download) is refused, and the file it names is never read."""
    source = pathlib.Path(timm_resnet)
    folder = tmp_path / "hostile"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
    other = tmp_path / "other.pth"  # the same model with other weights: loading it would change the outputs
    torch.save({k: torch.zeros_like(v) for k, v in
                timm.create_model("resnet10t", num_classes=7).state_dict().items()}, other)
    config = json.loads((source / "config.json").read_text())
    config["model_args"] = {"checkpoint_path": str(other)}
    (folder / "config.json").write_text(json.dumps(config))
    status, _, err = run_json(capsys, str(folder))
    assert status == 2 and err.count("\n") == 1, err
    assert "model_args name checkpoint_path" in err


def test_a_transformers_timm_wrapper_gets_the_image_timm_declares(tmp_path, capsys):
    """transformers' TimmWrapper over timm's resnet10t: its config names no image size, timm's data config
    does (it was refused "no input shape"); the outputs are from_pretrained's."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(4)
    config = transformers.TimmWrapperConfig(architecture="resnet10t", num_labels=4)
    model = transformers.TimmWrapperForImageClassification(config).eval()
    _randomize_norms(model)
    folder = tmp_path / "wrapped"
    model.save_pretrained(folder)
    status, result, err = run_json(capsys, str(folder), "--strict")
    assert status == 0, err
    assert result["architecture"]["class"] == "TimmWrapperForImageClassification"
    (image,) = result["inputs"]
    assert image["name"] == "pixel_values" and image["shape"] == [1, 3, 176, 176]
    assert "resolve_model_data_config" in image["origin"]
    reference = transformers.TimmWrapperForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = reference(pixel_values=reference_input(result)).logits
    (logits,) = [o for o in result["outputs"] if o["name"] == "logits"]
    assert logits["first"] == first_values(expected, 8)
    assert logits["stats"]["mean"] == output_stats(expected).mean
