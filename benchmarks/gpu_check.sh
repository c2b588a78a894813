#!/usr/bin/env bash
# One prepared run for a lent GPU machine (the device tool's `run`, from the repository root), so a
# session drawn for one spends its minutes on measuring, not on set-up. Uses the machine's own CUDA
# torch (never reinstalls it), installs ckptview without dependencies, then:
#   1. the runner's device tests (cuda runs, cpu/meta for comparison);
#   2. `ckptview devices --json`;
#   3. `ckptview run` of the README's MLP on cuda:0 (load report, latency, peak memory) as JSON.
#   4-5. a forward pass with no code (transformers; timm and torchvision when importable), on cuda:0.
# Results also go to $OUT when the device tool sets it. Not yet run on a GPU: no task so far drew one.
set -uo pipefail
OUT=${OUT:-/tmp/ckptview-gpu}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
        torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' | tee "$OUT/torch.txt"
$PY -m pip install -q --no-deps -e . || exit 1
$PY -m pip install -q numpy ml_dtypes safetensors pytest pytest-timeout 2>/dev/null
$PY -m pytest -q -p no:cacheprovider tests/core/run/test_devices.py tests/core/run/test_forward_pass.py -k "cuda or device or meta" \
    2>&1 | tee "$OUT/tests.txt"
$PY -m ckptview devices --json | tee "$OUT/devices.json"
work=$(mktemp -d)
cat > "$work/mlp.py" <<'PYEOF'
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden, self.act, self.output = nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 10)

    def forward(self, x):
        return self.output(self.act(self.hidden(x)))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.save(MLP().state_dict(), __file__.replace(".py", ".pt"))
PYEOF
$PY "$work/mlp.py"
$PY -m ckptview run "$work/mlp.pt" --model "$work/mlp.py:MLP" --device cuda:0 --input-shape 64,20 \
    --runs 100 --json | tee "$OUT/run_cuda.json"
# 4. A forward pass with no code (issue 27): a tiny Llama folder built by transformers, run on cuda:0 by
#    ckptview, against from_pretrained on the same device (needs transformers; skipped without it).
if $PY -c 'import transformers' 2>/dev/null; then
  $PY - "$work/llama" <<'PYEOF'
import sys, torch, transformers
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
transformers.LlamaForCausalLM(config).save_pretrained(sys.argv[1])
PYEOF
  $PY -m ckptview run "$work/llama" --device cuda:0 --json | tee "$OUT/run_llama_cuda.json"
  $PY -m pytest -q -p no:cacheprovider tests/core/run/test_architectures.py 2>&1 | tee "$OUT/architectures.txt"
fi
# 5. A Lightning .ckpt (issue 27) written by Lightning, run on cuda:0 by the user's class with init arguments
#    from hyper_parameters (needs lightning; skipped without it).
if $PY -c 'import lightning' 2>/dev/null; then
  cat > "$work/lit.py" <<'PYEOF'
import sys
import torch
import lightning as L


class Net(L.LightningModule):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.save_hyperparameters()
        self.l1, self.l2 = torch.nn.Linear(20, hidden), torch.nn.Linear(hidden, 10)
        self.example_input_array = torch.zeros(64, 20)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


if __name__ == "__main__":
    torch.manual_seed(0)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu")
    trainer.strategy.connect(Net(hidden=96))
    trainer.save_checkpoint(sys.argv[1])
PYEOF
  $PY "$work/lit.py" "$work/lit.ckpt" 2>/dev/null
  $PY -m ckptview run "$work/lit.ckpt" --model "$work/lit.py:Net" --device "${LIT_DEVICE:-cuda:0}" --runs 100 \
      --json | tee "$OUT/run_lightning_cuda.json"
fi
# 6. timm and torchvision (issue 27), when the machine's torch has a torchvision built for it and timm: a
#    timm folder as save_for_hf writes it and a torchvision resnet18 .pth, run on cuda:0 by ckptview, and the
#    library's own model on cuda:0 with the same image (the mean of the logits, side by side); then the CPU
#    tests that check both against the libraries bit for bit.
if $PY -c 'import torchvision, timm' 2>/dev/null; then
  $PY - "$work" <<'PYEOF'
import sys, torch, timm, torchvision
torch.manual_seed(0)
timm.models.save_for_hf(timm.create_model("resnet10t", num_classes=7), f"{sys.argv[1]}/timm",
                        safe_serialization=True)
torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), f"{sys.argv[1]}/resnet18.pth")
PYEOF
  $PY -m ckptview run "$work/timm" --device cuda:0 --runs 20 --json | tee "$OUT/run_timm_cuda.json"
  $PY -m ckptview run "$work/resnet18.pth" --device cuda:0 --runs 20 --json | tee "$OUT/run_torchvision_cuda.json"
  $PY - "$work" "$OUT" <<'PYEOF' 2>&1 | tee "$OUT/vision_reference.txt"
import json, sys, torch, timm, torchvision
from safetensors.torch import load_file
from ckptview.core.run.architectures import recognize, default_inputs
from ckptview.core.run.input_specs import make_array, to_torch
work, out = sys.argv[1:]
ref_timm = timm.create_model(f"local-dir:{work}/timm")
ref_timm.load_state_dict(load_file(f"{work}/timm/model.safetensors"))
ref_tv = torchvision.models.resnet18(num_classes=10)
ref_tv.load_state_dict(torch.load(f"{work}/resnet18.pth", weights_only=True))
for name, path, model in (("timm", f"{work}/timm", ref_timm), ("torchvision", f"{work}/resnet18.pth", ref_tv)):
    from ckptview.core.run.request import state_dict_tensors
    (spec,) = default_inputs(recognize(path, state_dict_tensors(path)))
    x = to_torch(make_array(spec, 0, 0), spec.dtype, "cuda:0")
    with torch.no_grad():
        expected = model.eval().to("cuda:0")(x).double()
    got = json.load(open(f"{out}/run_{name}_cuda.json"))["outputs"][0]["stats"]["mean"]
    print(name, "ckptview mean", got, "library mean", float(expected.mean()))
PYEOF
  $PY -m pytest -q -p no:cacheprovider tests/core/run/test_vision.py 2>&1 | tee "$OUT/vision_tests.txt"
fi
