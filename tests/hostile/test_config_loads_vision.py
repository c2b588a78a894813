"""Config fields that timm turns into loads, through transformers' TimmWrapper and timm's own folders (issue 34,
finding 6): refused in one line, the payload never runs, nothing outside the folder is opened.

The finding as filed: a TimmWrapper folder whose `model_args.checkpoint_path` named another file made
`ckptview run FOLDER` exit 0 with that file's weights loaded (transformers passes `model_args` to
`timm.create_model`). Needs timm, so it runs in .venv-vision (`make test-vision`, marker `vision`).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import warnings

import pytest

from tests.hostile.config_loads import SRC, edit_config, outside_files, traced


def _library(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - torchvision built for another torch raises RuntimeError
        if os.environ.get("CKPTVIEW_REQUIRE_VISION"):
            raise
        pytest.skip(f"{name} does not import here ({type(exc).__name__}); `make test-vision` runs these tests",
                    allow_module_level=True)


timm = _library("timm")
transformers = _library("transformers")
torch = _library("torch")

pytestmark = pytest.mark.vision


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory):
    """resnet10t as transformers saves timm models (TimmWrapperForImageClassification, 3 classes)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("wrapper") / "tw"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.TimmWrapperConfig.from_dict({"architecture": "resnet10t", "num_classes": 3})
        transformers.TimmWrapperForImageClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory):
    """resnet10t as timm saves it (save_for_hf: config.json with architecture, pretrained_cfg, model_args)."""
    folder = tmp_path_factory.mktemp("timm") / "resnet10t"
    timm.models.save_for_hf(timm.create_model("resnet10t", num_classes=3), folder, safe_serialization=True)
    return folder


def _zeros(path) -> str:
    """resnet10t's weights, all zero: loading them changes every output."""
    torch.save({k: torch.zeros_like(v) for k, v in timm.create_model("resnet10t", num_classes=3).state_dict().items()},
               path)
    return str(path)


def _args(c: dict) -> dict:
    c["model_args"] = c.get("model_args") or {}
    return c["model_args"]


WRAPPER = [
    ("checkpoint_path", lambda c, o, p, z: _args(c).update(checkpoint_path=z), "checkpoint_path"),
    ("checkpoint_path_pickle", lambda c, o, p, z: _args(c).update(checkpoint_path=str(p)), "checkpoint_path"),
    ("overlay_file", lambda c, o, p, z: _args(c).update(pretrained=True, pretrained_cfg_overlay={"file": z}),
     "pretrained"),
    ("overlay_alone", lambda c, o, p, z: _args(c).update(pretrained_cfg_overlay={"file": z}), "pretrained_cfg_overlay"),
    ("args_pretrained_cfg", lambda c, o, p, z: _args(c).update(pretrained_cfg={"file": z}), "pretrained_cfg"),
    ("cache_dir", lambda c, o, p, z: _args(c).update(cache_dir=str(o)), "cache_dir"),
    ("local_dir", lambda c, o, p, z: c.update(architecture=f"local-dir:{o}"), "architecture"),
    ("hf_hub", lambda c, o, p, z: c.update(architecture="hf-hub:timm/resnet18.a1_in1k"), "architecture"),
    ("pretrained_cfg_file", lambda c, o, p, z: c.update(pretrained_cfg={"file": z, "num_classes": 3}), "file"),
    ("pretrained_cfg_hub", lambda c, o, p, z: c.update(pretrained_cfg={"hf_hub_id": "timm/resnet18.a1_in1k"}),
     "hf_hub_id"),
    ("pretrained_cfg_url", lambda c, o, p, z: c.update(pretrained_cfg={"url": "https://example.invalid/w.pth"}), "url"),
    ("features_cls", lambda c, o, p, z: _args(c).update(features_only=True, feature_cls=str(p)), "feature_cls"),
]


@pytest.mark.parametrize(("case", "change", "named"), WRAPPER, ids=[w[0] for w in WRAPPER])
def test_a_timm_wrapper_config_that_names_a_load_is_refused(wrapper, tmp_path, case, change, named):
    outside, payload, marker = outside_files(tmp_path)
    zeros = _zeros(outside / "zeros.pth")
    folder = edit_config(wrapper, tmp_path / "model", lambda c: change(c, outside, payload, zeros))
    status, err, opened = traced(["run", str(folder), "--device", "cpu", "--input-shape", "1,3,32,32", "--runs", "1",
                                  "--warmup", "0"], outside)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err[-2000:]
    assert named in lines[0], lines[0]
    assert not marker.exists()
    assert opened in (None, []), opened


TIMM = [
    ("checkpoint_path", lambda c, o, p, z: _args(c).update(checkpoint_path=z), "checkpoint_path"),
    ("pretrained_cfg_file", lambda c, o, p, z: c["pretrained_cfg"].update(file=z), "file"),
    ("pretrained_cfg_hub", lambda c, o, p, z: c["pretrained_cfg"].update(hf_hub_id="timm/resnet18.a1_in1k"),
     "hf_hub_id"),
    ("architecture", lambda c, o, p, z: c.update(architecture=f"local-dir:{o}"), "architecture"),
    ("string_arg", lambda c, o, p, z: _args(c).update(block_args=str(p)), "block_args"),
]


@pytest.mark.parametrize(("case", "change", "named"), TIMM, ids=[t[0] for t in TIMM])
def test_a_timm_config_that_names_a_load_is_refused(timm_folder, tmp_path, case, change, named):
    outside, payload, marker = outside_files(tmp_path)
    zeros = _zeros(outside / "zeros.pth")
    folder = edit_config(timm_folder, tmp_path / "model", lambda c: change(c, outside, payload, zeros))
    status, err, opened = traced(["run", str(folder), "--device", "cpu", "--runs", "1", "--warmup", "0"], outside)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err[-2000:]
    assert named in lines[0] or "architecture" in lines[0], lines[0]
    assert not marker.exists()
    assert opened in (None, []), opened


def test_a_timm_backbone_named_by_path_is_refused(tmp_path):
    """TimmBackbone hands `backbone` to timm.create_model: `local-dir:` would read another folder's config."""
    outside, _payload, marker = outside_files(tmp_path)
    folder = tmp_path / "backbone"
    folder.mkdir()
    config = {"model_type": "timm_backbone", "architectures": ["TimmBackbone"], "backbone": f"local-dir:{outside}",
              "num_channels": 3, "features_only": True, "use_pretrained_backbone": False, "out_indices": [1]}
    (folder / "config.json").write_text(json.dumps(config))
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, str(folder / "model.safetensors"))
    status, err, opened = traced(["run", str(folder), "--device", "cpu", "--input-shape", "1,3,32,32"], outside)
    assert status == 2 and err.strip().count("\n") == 0 and "backbone" in err, err[-2000:]
    assert opened in (None, []) and not marker.exists(), opened


def test_the_meta_build_child_refuses_on_its_own(wrapper, tmp_path):
    """The child that names a Trainer folder's optimizer state builds with the run worker's builder: given a
    config the parent's check would have refused, it refuses too and opens nothing outside."""
    outside, payload, marker = outside_files(tmp_path)
    zeros = _zeros(outside / "zeros.pth")
    config = json.loads((wrapper / "config.json").read_text())
    config["model_args"] = {"checkpoint_path": zeros}
    script = ("import sys; sys.path.insert(0, sys.argv[1])\n"
              "from ckptview.core.inspect import hf_order\n"
              "import json\n"
              "print(json.dumps(hf_order._build('TimmWrapperForImageClassification', json.loads(sys.argv[2]))))\n")
    out = tmp_path / "child.out"
    import shutil

    command = [sys.executable, "-c", script, SRC, json.dumps(config)]
    strace = shutil.which("strace")
    log = tmp_path / "trace.log"
    if strace:
        command = [strace, "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", str(log), *command]
    with open(out, "w") as fh:
        proc = subprocess.run(command, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_text().strip().splitlines()[-1] == "null"
    assert not marker.exists()
    if strace:
        assert str(outside) not in log.read_text()


def test_every_pretrained_cfg_timm_ships_is_allowed():
    """No false refusals: every pretrained config timm registers, as save_for_hf writes it (sources removed)."""
    from timm.models import get_pretrained_cfg, list_pretrained
    from timm.models._pretrained import filter_pretrained_cfg

    from ckptview.core.run.config_guard import ConfigRefused, timm_parts

    refused = []
    names = list_pretrained()
    for name in names:
        cfg = get_pretrained_cfg(name)
        if cfg is None:
            continue
        saved = filter_pretrained_cfg(cfg.to_dict(), remove_source=True, remove_null=True)
        arch = saved.pop("architecture", name.split(".")[0])
        try:
            timm_parts(json.loads(json.dumps({"architecture": arch, "pretrained_cfg": saved})))
        except ConfigRefused as exc:
            refused.append((name, str(exc)))
    assert len(names) > 1000 and not refused, refused[:10]


def test_a_sound_timm_wrapper_folder_still_runs(wrapper, capsys):
    from ckptview.cli import main

    status = main(["run", str(wrapper), "--device", "cpu", "--input-shape", "1,3,32,32", "--json", "--runs", "1",
                   "--warmup", "0"])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert json.loads(out.out)["outputs"][0]["shape"] == [1, 3]
