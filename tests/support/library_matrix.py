"""The real-library matrix: tiny models of the architectures people run, built at test time with the
libraries' own config classes and written by the libraries' own `save_pretrained` (no download).

Each architecture is written in two of the eight ways a folder is written (safetensors or `.bin`, one file or
shards, float32 or bfloat16): one in rotation and its opposite on every axis, so that every architecture meets
both sides of each axis and every way is met by several architectures, without the whole cross-product.
`.bin` folders hold what transformers 4 wrote with `safe_serialization=False` and the Hub still serves:
the tensors `save_pretrained` writes (its Hub key layout), in `pytorch_model.bin` or its shards and index.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ckptview.core.run.input_specs import make_array, parse_input_specs
from ckptview.core.run.result import InputReport
from ckptview.core.worker.forward import to_torch

# name: (weights, sharded, dtype); names read "safetensors sharded bf16", "bin fp32", ...
FORMATS = {f"{weights}{' sharded' if sharded else ''} {short}": (weights, sharded, dtype)
           for weights in ("safetensors", "bin") for sharded in (False, True)
           for short, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))}
# Rotation order: consecutive architectures differ on more than one axis.
ROTATION = ["safetensors fp32", "bin bf16", "safetensors sharded bf16", "bin sharded fp32",
            "safetensors bf16", "bin fp32", "safetensors sharded fp32", "bin sharded bf16"]
assert sorted(ROTATION) == sorted(FORMATS)
SHARD = "24KB"  # tiny models: a few shards each


@dataclass(frozen=True)
class Case:
    """One architecture: its family, its transformers class, and its tiny config."""

    name: str
    family: str
    cls: str
    config: Callable[[Any], Any]
    preprocessor: dict[str, Any] | None = None  # written beside config.json as preprocessor_config.json


def _decoder(cls_name: str, **extra: Any) -> Callable[[Any], Any]:
    def make(transformers: Any) -> Any:
        return getattr(transformers, cls_name)(**{"vocab_size": 96, **extra})
    return make


LLAMA_LIKE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 64}
BERT_LIKE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
             "max_position_embeddings": 64}

CASES: list[Case] = [
    # decoders
    Case("gpt2", "decoder", "GPT2LMHeadModel", _decoder("GPT2Config", n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                        bos_token_id=0, eos_token_id=0)),
    Case("llama", "decoder", "LlamaForCausalLM", _decoder("LlamaConfig", **LLAMA_LIKE, tie_word_embeddings=True)),
    Case("mistral", "decoder", "MistralForCausalLM", _decoder("MistralConfig", **LLAMA_LIKE, sliding_window=16)),
    Case("mixtral", "decoder", "MixtralForCausalLM", _decoder("MixtralConfig", **LLAMA_LIKE, num_local_experts=4,
                                                              num_experts_per_tok=2)),
    Case("qwen2", "decoder", "Qwen2ForCausalLM", _decoder("Qwen2Config", **LLAMA_LIKE)),
    Case("qwen3", "decoder", "Qwen3ForCausalLM", _decoder("Qwen3Config", **LLAMA_LIKE, head_dim=8)),
    Case("gemma", "decoder", "GemmaForCausalLM", _decoder("GemmaConfig", **LLAMA_LIKE, head_dim=8)),
    Case("gemma2", "decoder", "Gemma2ForCausalLM", _decoder("Gemma2Config", **LLAMA_LIKE, head_dim=8,
                                                            sliding_window=16)),
    Case("phi", "decoder", "PhiForCausalLM", _decoder("PhiConfig", hidden_size=32, intermediate_size=64,
                                                      num_hidden_layers=2, num_attention_heads=4,
                                                      max_position_embeddings=64)),
    Case("phi3", "decoder", "Phi3ForCausalLM", _decoder("Phi3Config", **LLAMA_LIKE, pad_token_id=0)),
    Case("opt", "decoder", "OPTForCausalLM", _decoder("OPTConfig", hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                                      num_attention_heads=4, max_position_embeddings=64,
                                                      word_embed_proj_dim=32)),
    Case("falcon", "decoder", "FalconForCausalLM", _decoder("FalconConfig", hidden_size=32, num_hidden_layers=2,
                                                            num_attention_heads=4)),
    Case("bloom", "decoder", "BloomForCausalLM", _decoder("BloomConfig", hidden_size=32, n_layer=2, n_head=4)),
    Case("mpt", "decoder", "MptForCausalLM", _decoder("MptConfig", d_model=32, n_layers=2, n_heads=4, max_seq_len=64)),
    Case("gptj", "decoder", "GPTJForCausalLM", _decoder("GPTJConfig", n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                        rotary_dim=4)),
    Case("gpt_neox", "decoder", "GPTNeoXForCausalLM", _decoder("GPTNeoXConfig", hidden_size=32, intermediate_size=64,
                                                                num_hidden_layers=2, num_attention_heads=4,
                                                                max_position_embeddings=64)),
    # encoders
    Case("bert", "encoder", "BertForMaskedLM", _decoder("BertConfig", **BERT_LIKE)),
    Case("roberta", "encoder", "RobertaModel", _decoder("RobertaConfig", **BERT_LIKE)),
    Case("distilbert", "encoder", "DistilBertModel", _decoder("DistilBertConfig", dim=32, n_layers=2, n_heads=4,
                                                              hidden_dim=64, max_position_embeddings=64)),
    Case("deberta-v2", "encoder", "DebertaV2Model", _decoder("DebertaV2Config", **BERT_LIKE)),
    Case("electra", "encoder", "ElectraModel", _decoder("ElectraConfig", embedding_size=16, **BERT_LIKE)),
    Case("albert", "encoder", "AlbertModel", _decoder("AlbertConfig", embedding_size=16, **BERT_LIKE)),
    Case("mobilebert", "encoder", "MobileBertModel", _decoder("MobileBertConfig", hidden_size=32, num_hidden_layers=2,
                                                              num_attention_heads=4, intermediate_size=64,
                                                              embedding_size=16, intra_bottleneck_size=16,
                                                              true_hidden_size=16, max_position_embeddings=64)),
    Case("xlm-roberta", "encoder", "XLMRobertaModel", _decoder("XLMRobertaConfig", **BERT_LIKE)),
    # encoder-decoders
    Case("t5", "encoder-decoder", "T5ForConditionalGeneration",
         _decoder("T5Config", d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, decoder_start_token_id=0)),
    Case("bart", "encoder-decoder", "BartForConditionalGeneration",
         _decoder("BartConfig", d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)),
    # vision
    Case("vit", "vision", "ViTForImageClassification",
         lambda t: t.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, num_labels=5)),
    Case("swin", "vision", "SwinModel",
         lambda t: t.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                window_size=4)),
    Case("convnext", "vision", "ConvNextForImageClassification",
         lambda t: t.ConvNextConfig(image_size=32, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], num_labels=4)),
    Case("resnet", "vision", "ResNetForImageClassification",
         lambda t: t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3),
         preprocessor={"image_processor_type": "ConvNextImageProcessor", "crop_pct": 0.875, "do_normalize": True,
                       "do_rescale": True, "do_resize": True, "size": {"shortest_edge": 48}}),
    # multimodal
    Case("clip", "multimodal", "CLIPModel",
         lambda t: t.CLIPConfig(text_config={"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64,
                                             "num_hidden_layers": 2, "num_attention_heads": 4,
                                             "max_position_embeddings": 32},
                                vision_config={"image_size": 32, "patch_size": 8, "hidden_size": 32,
                                               "intermediate_size": 64, "num_hidden_layers": 2,
                                               "num_attention_heads": 4},
                                projection_dim=16)),
    Case("siglip", "multimodal", "SiglipModel",
         lambda t: t.SiglipConfig(text_config={"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64,
                                               "num_hidden_layers": 2, "num_attention_heads": 4,
                                               "max_position_embeddings": 16},
                                  vision_config={"image_size": 32, "patch_size": 8, "hidden_size": 32,
                                                 "intermediate_size": 64, "num_hidden_layers": 2,
                                                 "num_attention_heads": 4})),
    # audio
    Case("whisper", "audio", "WhisperForConditionalGeneration",
         _decoder("WhisperConfig", d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                  max_source_positions=16, max_target_positions=32, decoder_start_token_id=1, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2, suppress_tokens=None, begin_suppress_tokens=None)),
    Case("wav2vec2", "audio", "Wav2Vec2Model",
         lambda t: t.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
                                    num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                    do_stable_layer_norm=True, feat_extract_norm="layer"),
         preprocessor={"feature_extractor_type": "Wav2Vec2FeatureExtractor", "sampling_rate": 4000,
                       "feature_size": 1, "padding_value": 0.0, "return_attention_mask": True}),
]


def opposite(combo: str) -> str:
    """The way of writing that differs from `combo` on every axis."""
    weights, sharded, dtype = FORMATS[combo]
    flipped = ("bin" if weights == "safetensors" else "safetensors", not sharded,
               torch.float32 if dtype == torch.bfloat16 else torch.bfloat16)
    return next(name for name, way in FORMATS.items() if way == flipped)


def combos(index: int) -> list[str]:
    """The ways architecture number `index` is written: one in rotation, and its opposite on every axis."""
    first = ROTATION[index % len(ROTATION)]
    return [first, opposite(first)]


def matrix() -> list[tuple[Case, str]]:
    """(case, format) pairs of the whole matrix."""
    return [(case, combo) for i, case in enumerate(CASES) for combo in combos(i)]


def write_folder(case: Case, combo: str, root: str) -> str:
    """The architecture as its library saves it, seeded, in `combo`'s way; the folder's path."""
    import transformers

    weights, sharded, dtype = FORMATS[combo]
    folder = os.path.join(root, f"{case.name}-{combo.replace(' ', '-')}")
    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    torch.manual_seed(0)
    model = getattr(transformers, case.cls)(case.config(transformers)).eval()
    _randomise_buffers_and_norms(model)
    model = model.to(dtype)
    shard = SHARD if sharded else "50GB"
    if weights == "safetensors":
        model.save_pretrained(folder, max_shard_size=shard)
    else:
        _save_bin(model, folder, shard)
    if case.preprocessor is not None:
        with open(os.path.join(folder, "preprocessor_config.json"), "w") as fh:
            json.dump(case.preprocessor, fh)
    return folder


def _randomise_buffers_and_norms(model: torch.nn.Module) -> None:
    """Norm weights and biases away from their 1 and 0 (so a norm loaded from the wrong key shows), seeded."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 1:
                param.add_(torch.randn(param.shape, generator=generator) * 0.1)


def _save_bin(model: Any, folder: str, shard: str) -> None:
    """`pytorch_model.bin` (or its shards and index) with the tensors `save_pretrained` writes, and its config."""
    import inspect
    import tempfile

    from safetensors.torch import load_file

    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:  # transformers 4
        model.save_pretrained(folder, safe_serialization=False, max_shard_size=shard)
        return
    from huggingface_hub import save_torch_state_dict

    with tempfile.TemporaryDirectory() as staging:
        model.save_pretrained(staging)  # its key layout, its config and generation config
        state: dict[str, torch.Tensor] = {}
        for name in sorted(os.listdir(staging)):
            if name.endswith(".safetensors"):
                state.update(load_file(os.path.join(staging, name)))
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(staging):
            if name.endswith(".json") and "safetensors" not in name:
                os.replace(os.path.join(staging, name), os.path.join(folder, name))
    save_torch_state_dict(state, folder, safe_serialization=False, max_shard_size=shard,
                          filename_pattern="pytorch_model{suffix}.bin")


def remade_inputs(reports: list[InputReport], seed: int = 0) -> dict[str, torch.Tensor]:
    """The inputs a run says it made (each one's spec, the seed), made again here, by name."""
    out = {}
    for index, report in enumerate(reports):
        assert report.spec is not None and report.name, report
        (spec,) = parse_input_specs(report.spec)
        assert spec.name == report.name
        out[report.name] = to_torch(make_array(spec, seed, index), spec.dtype, "cpu")
    return out


# diffusers: (name, class, its config); each written in the ways of DIFFUSERS_FORMATS.
DIFFUSERS = [
    ("unet2d", "UNet2DModel", {"sample_size": 8, "in_channels": 3, "out_channels": 3, "block_out_channels": (8, 16),
                               "layers_per_block": 1, "norm_num_groups": 4,
                               "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
                               "up_block_types": ("AttnUpBlock2D", "UpBlock2D")}),
    ("unet2d-condition", "UNet2DConditionModel",
     {"sample_size": 8, "in_channels": 4, "out_channels": 4, "block_out_channels": (8, 16), "layers_per_block": 1,
      "norm_num_groups": 4, "cross_attention_dim": 8, "attention_head_dim": 2,
      "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
      "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D")}),
    ("autoencoder-kl", "AutoencoderKL", {"sample_size": 16, "in_channels": 3, "out_channels": 3, "latent_channels": 2,
                                         "block_out_channels": (8, 16), "layers_per_block": 1, "norm_num_groups": 4,
                                         "down_block_types": ("DownEncoderBlock2D", "DownEncoderBlock2D"),
                                         "up_block_types": ("UpDecoderBlock2D", "UpDecoderBlock2D")}),
]
DIFFUSERS_FORMATS = {"unet2d": ["safetensors fp32", "bin bf16"], "unet2d-condition": ["safetensors sharded bf16"],
                     "autoencoder-kl": ["safetensors fp32"]}  # diffusers reads no sharded .bin of its own


def write_diffusers_folder(name: str, cls: str, config: dict[str, Any], combo: str, root: str) -> str:
    """A diffusers model as its `save_pretrained` writes it, seeded, in `combo`'s way."""
    import diffusers

    weights, sharded, dtype = FORMATS[combo]
    folder = os.path.join(root, f"{name}-{combo.replace(' ', '-')}")
    torch.manual_seed(0)
    model = getattr(diffusers, cls)(**config).eval()
    _randomise_buffers_and_norms(model)
    model.to(dtype).save_pretrained(folder, safe_serialization=weights == "safetensors",
                                    max_shard_size=SHARD if sharded else "10GB")
    return folder


def auto_dtype(transformers: Any) -> dict[str, str]:
    """from_pretrained's keyword for the checkpoint's own dtype: `dtype="auto"` (the default from transformers
    5; `torch_dtype` before 4.56, whose default was float32)."""
    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": "auto"}
