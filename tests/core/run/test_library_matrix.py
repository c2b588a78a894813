"""The real-library matrix: every architecture in `tests/support/library_matrix.py`, written by its library's
`save_pretrained` in one or two of the four ways (safetensors or `.bin`, one file or shards, float32 or
bfloat16), runs with no code and gives what `from_pretrained` + the same forward on the same inputs gives.

Checked for each folder: every weight of the model comes from the file (the library's own key conversions:
GPT-NeoX's `embed_out`, Mixtral's experts, ViT's and Swin's `attention.attention`), the inputs are the ones the
model declares, each named with where it came from, and every output equals the library's bit for bit
(weights sit where a memory map of the file would put them, as the library computes on them: see
`core/worker/tensors.py`). The worker's code runs in this process (`tests/support/run_here.py`): dozens of
worker processes would each import torch and transformers again.
"""

from __future__ import annotations

import pytest
import torch

from ckptview.core.run.request import RunRequest, run
from ckptview.core.worker.forward import flatten_outputs
from tests.support.library_matrix import (
    DIFFUSERS,
    DIFFUSERS_FORMATS,
    FORMATS,
    auto_dtype,
    matrix,
    remade_inputs,
    write_diffusers_folder,
    write_folder,
)
from tests.support.run_here import worker_here

transformers = pytest.importorskip("transformers")

# Both sides compute on the same bits in memory placed alike: the same kernels, the same rounding.
TOLERANCE = 0.0

# The inputs each family's models declare (names in order), where the default rule would not say it all.
DECLARED = {
    "t5": ["input_ids", "attention_mask", "decoder_input_ids"],
    "bart": ["input_ids", "attention_mask", "decoder_input_ids"],
    "whisper": ["input_features", "decoder_input_ids"],
    "wav2vec2": ["input_values"],
    "clip": ["input_ids", "attention_mask", "pixel_values"],
    "siglip": ["input_ids", "attention_mask", "pixel_values"],
    "vit": ["pixel_values"], "swin": ["pixel_values"], "convnext": ["pixel_values"], "resnet": ["pixel_values"],
}

# Where a declared input's shape comes from when the config alone does not say it (finding 3).
SHAPES = {
    ("whisper", "input_features"): ([1, 16, 32], "num_mel_bins 16 x 2*max_source_positions 32"),
    ("wav2vec2", "input_values"): ([1, 4000], "sampling_rate"),  # from its preprocessor_config.json
    ("resnet", "pixel_values"): ([1, 3, 48, 48], "size from preprocessor_config.json"),
    ("clip", "pixel_values"): ([1, 3, 32, 32], "image_size from the config"),
    ("t5", "decoder_input_ids"): ([1, 8], "encoder-decoder"),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("matrix"))


@pytest.mark.slow
@pytest.mark.parametrize(("case", "combo"), matrix(), ids=[f"{c.name}-{f.replace(' ', '-')}" for c, f in matrix()])
def test_a_folder_runs_as_its_library_loads_it(case, combo, root):
    if not hasattr(transformers, case.cls):
        pytest.skip(f"transformers {transformers.__version__} has no {case.cls}")
    folder = write_folder(case, combo, root)
    with worker_here() as seen:
        result = run(RunRequest(folder, runs=1, warmup=0))
    assert result.architecture == {"library": "transformers", "class": case.cls, "source": "config.json"}
    assert result.warnings == [] and result.partial is None, result.warnings
    load = result.load
    assert load.missing == load.unexpected == load.mismatched == [] and load.unplaced == []

    names = [i.name for i in result.inputs]
    assert names == DECLARED.get(case.name, ["input_ids", "attention_mask"])
    assert all(i.origin.startswith(f"{i.name}: ") for i in result.inputs)
    for report in result.inputs:
        if (case.name, report.name) in SHAPES:
            shape, origin = SHAPES[case.name, report.name]
            assert report.shape == shape and origin in report.origin, report
    reference = getattr(transformers, case.cls).from_pretrained(folder, **auto_dtype(transformers)).eval()
    dtype = FORMATS[combo][2]
    assert next(reference.parameters()).dtype == dtype  # what the library loads; ours is the same (below)
    inputs = remade_inputs(result.inputs)
    with torch.no_grad():
        expected = dict(flatten_outputs(reference(**inputs)))
    worst = 0.0
    compared = 0
    for name, ours in seen.last.items():
        if not isinstance(ours, torch.Tensor):
            continue
        theirs = expected[name]
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, name
        worst = max(worst, float((ours.double() - theirs.double()).abs().max()) if ours.numel() else 0.0)
        compared += 1
    assert compared and {o.name for o in result.outputs} <= set(expected)
    print(f"\nMATRIX | {case.family} | {case.name} | {combo} | ok | max abs diff {worst:.3g} | "
          f"{', '.join(names)}")
    assert worst <= TOLERANCE, (case.name, combo, worst)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "cls", "config", "combo"),
                         [(n, c, cfg, f) for n, c, cfg in DIFFUSERS for f in DIFFUSERS_FORMATS[n]],
                         ids=[f"{n}-{f.replace(' ', '-')}" for n, _, _ in DIFFUSERS for f in DIFFUSERS_FORMATS[n]])
def test_a_diffusers_folder_runs_as_diffusers_loads_it(name, cls, config, combo, root):
    """diffusers builds the model in float32 whatever the file holds (its default), fixes deprecated keys and
    keeps the weights where they were read; the outputs are its own, bit for bit."""
    diffusers = pytest.importorskip("diffusers")
    folder = write_diffusers_folder(name, cls, config, combo, root)
    with worker_here() as seen:
        result = run(RunRequest(folder, runs=1, warmup=0, strict=True))
    assert result.architecture == {"library": "diffusers", "class": cls, "source": "config.json"}
    assert result.warnings == [] and result.partial is None
    reference = getattr(diffusers, cls).from_pretrained(folder).eval()
    inputs = remade_inputs(result.inputs)
    assert list(inputs)[0] == "sample" and all(i.origin.startswith(f"{i.name}: ") for i in result.inputs)
    with torch.no_grad():
        expected = dict(flatten_outputs(reference(**inputs)))
    worst = max(float((seen.last[k].double() - v.double()).abs().max()) for k, v in expected.items()
                if isinstance(v, torch.Tensor))
    print(f"\nMATRIX | diffusers | {name} | {combo} | ok | max abs diff {worst:.3g} | {', '.join(inputs)}")
    assert worst <= TOLERANCE


def test_a_pooler_equals_the_library_s_to_the_last_bit(tmp_path):
    """Finding 6: BERT's pooler differed from from_pretrained's by 1-2 ulp (3e-8 here), because the library
    computes on weights where safetensors' memory map left them, off a 64-byte boundary, and CPU kernels round
    by alignment. ckptview reads each weight to the same place within a page: the same bits out."""
    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(tmp_path)
    with worker_here() as seen:
        result = run(RunRequest(str(tmp_path), runs=1, warmup=0))
    reference = transformers.BertModel.from_pretrained(tmp_path, **auto_dtype(transformers)).eval()
    with torch.no_grad():
        expected = reference(**remade_inputs(result.inputs))
    assert torch.equal(seen.last["pooler_output"], expected.pooler_output)
    assert torch.equal(seen.last["last_hidden_state"], expected.last_hidden_state)
