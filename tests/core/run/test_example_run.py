"""The bundled example runs its forward pass with no code of the user's (issue 33, finding 5): its model is
ckptview's own (`core/worker/example_model.py`), taken only for a file whose bytes are the example's."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from ckptview import cli
from ckptview.core.run.example import example_path
from ckptview.core.worker.example_model import build_mlp
from tests.support.library_matrix import remade_inputs
from tests.support.run_here import worker_here


def example_model() -> torch.nn.Module:
    model = build_mlp().eval()
    model.load_state_dict(torch.load(example_path(), weights_only=True)["model_state_dict"])
    return model


@pytest.mark.slow
def test_the_bundled_example_runs_with_no_code(capsys):
    """Through a real worker, as `make run` users would: `ckptview run example.pth`."""
    status = cli.main(["run", example_path(), "--json", "--runs", "1", "--warmup", "0", "--strict"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    result = json.loads(captured.out)
    assert result["architecture"] == {"library": "ckptview", "class": "MLP",
                                      "source": "the bundled example (ckptview's own code)"}
    assert result["warnings"] == [] and result["load"]["tensors"] == 4
    (report,) = result["inputs"]
    assert report["name"] == "x" and report["shape"] == [2, 20] and "20 input features" in report["origin"]
    from ckptview.core.run.result import InputReport

    with torch.no_grad():
        expected = example_model()(**remade_inputs([InputReport.from_json(report)]))
    (out,) = result["outputs"]
    assert out["shape"] == [2, 10] and out["first"] == expected.double().reshape(-1)[:8].tolist()


def test_the_example_is_known_by_its_bytes_not_its_name(tmp_path, capsys):
    copy = tmp_path / "renamed.pth"
    shutil.copyfile(example_path(), copy)
    with worker_here():
        assert cli.main(["run", str(copy), "--json", "--runs", "1", "--warmup", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["architecture"]["library"] == "ckptview"
    impostor = tmp_path / "example.pth"  # the example's name and layout, other weights: not ckptview's model
    checkpoint = torch.load(example_path(), weights_only=True)
    checkpoint["model_state_dict"] = {k: v + 1 for k, v in checkpoint["model_state_dict"].items()}
    torch.save(checkpoint, impostor)
    with worker_here():
        assert cli.main(["run", str(impostor)]) == 2
    err = capsys.readouterr().err
    assert "state dict (weights only)" in err and "--model" in err
