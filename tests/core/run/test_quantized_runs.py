"""A quantized Hugging Face folder runs on this device with the weights ckptview dequantizes (equal to the
library's own dequantization), built unquantized by transformers, its outputs bit for bit those of the model
loaded with the library's dequantized weights; a folder whose scheme ckptview cannot dequantize is refused in
one line naming it, never run with weights left at random."""

from __future__ import annotations

import json

import pytest
import torch

from ckptview.core.run.process import RunError
from ckptview.core.run.request import RunRequest, run
from ckptview.core.worker.forward import flatten_outputs
from tests.support.library_matrix import auto_dtype, remade_inputs
from tests.support.quantized import bnb_llama, packed_llama, write_folder
from tests.support.run_here import worker_here

transformers = pytest.importorskip("transformers")


def _reference_model(folder, config, base, dequantized, dtype):
    """transformers' own `from_pretrained` of the same model with the library's dequantized weights."""
    state = {**base, **{k: v.to(dtype) for k, v in dequantized.items()}}
    write_folder(folder, state, {**config.to_dict(), "dtype": str(dtype).removeprefix("torch.")})
    return transformers.LlamaForCausalLM.from_pretrained(str(folder), **auto_dtype(transformers)).eval()


@pytest.mark.parametrize("scheme", ["gptq", "nf4"])
def test_a_quantized_folder_runs_with_its_dequantized_weights(tmp_path, scheme):
    folder = tmp_path / "quantized"
    if scheme == "gptq":
        base, config, reference = packed_llama(folder, "gptq", group_size=32, act_order=True)
        dtype = torch.float16
    else:
        config, reference = bnb_llama(folder, "nf4")
        from tests.support.quantized import tiny_llama

        base = tiny_llama(dtype=torch.bfloat16)[1]
        dtype = torch.bfloat16
    with worker_here() as seen:
        result = run(RunRequest(str(folder), runs=1, warmup=0))
    assert result.architecture == {"library": "transformers", "class": "LlamaForCausalLM", "source": "config.json"}
    assert result.warnings and "dequantized by ckptview" in result.warnings[0]
    load = result.load
    assert load.missing == load.unexpected == load.mismatched == [] and result.partial is None
    model = _reference_model(tmp_path / "plain", config, base, reference, dtype)
    with torch.no_grad():
        expected = dict(flatten_outputs(model(**remade_inputs(result.inputs))))
    compared = 0
    for name, ours in seen.last.items():
        if isinstance(ours, torch.Tensor):
            assert ours.dtype == expected[name].dtype and torch.equal(ours, expected[name]), name
            compared += 1
    assert compared


def test_a_scheme_ckptview_does_not_dequantize_is_refused_naming_it(tmp_path):
    config, _reference = bnb_llama(tmp_path, "nf4")
    data = json.loads((tmp_path / "config.json").read_text())
    data["quantization_config"] = {"quant_method": "hqq"}
    (tmp_path / "config.json").write_text(json.dumps(data))
    # the parts are recognised by their names (bitsandbytes) whatever the config says: a config naming hqq
    # over weights that are no hqq is refused too, once no weight of its scheme is recognised
    for path in tmp_path.glob("model.safetensors"):
        from safetensors.torch import load_file

        plain = {k: v for k, v in load_file(str(path)).items() if "quant_state" not in k and ".absmax" not in k
                 and "quant_map" not in k}
        write_folder(tmp_path, plain, data)
    with pytest.raises(RunError, match="^config.json's quantization_config names hqq, and no weight of it"):
        run(RunRequest(str(tmp_path), runs=1, warmup=0))


def test_a_broken_part_is_refused_naming_the_scheme(tmp_path):
    packed_llama(tmp_path, "gptq", group_size=32)
    from safetensors.torch import load_file

    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["model.layers.0.mlp.up_proj.scales"] = tensors["model.layers.0.mlp.up_proj.scales"][:3]
    write_folder(tmp_path, tensors, json.loads((tmp_path / "config.json").read_text()))
    with pytest.raises(RunError, match=r"^transformers LlamaForCausalLM|^cannot dequantize this int4 GPTQ, group 32 "
                                       r"model: scales 'model.layers.0.mlp.up_proj.scales' are 3x512"):
        run(RunRequest(str(tmp_path), runs=1, warmup=0))
