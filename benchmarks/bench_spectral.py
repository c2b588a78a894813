"""Weight spectra of a GPT-2-small-sized set of Linear layers: ckptview vs WeightWatcher after torch.load.

    .venv/bin/python benchmarks/bench_spectral.py              # ~500 MB of float32 weights in a temp dir
    .venv/bin/python benchmarks/bench_spectral.py --blocks 2   # a quick run

The file holds GPT-2 small's Linear weights as nn.Linear stores them (out x in): per block attn.c_attn
2304x768, attn.c_proj 768x768, mlp.c_fc 3072x768, mlp.c_proj 768x3072, and lm_head 50257x768 (GPT-2 ties
it to the token embedding); random N(0, 0.02) values. Each side runs in a fresh interpreter:

- WeightWatcher: ``torch.load(weights_only=True)`` into a model of nn.Linear layers, then
  ``WeightWatcher(model).analyze(max_N=60000)`` (its default skips layers with a dimension above 50,000;
  raised so both sides analyse the same 49 layers). Timed: load and analyze, separately and together.
- ckptview: ``open_checkpoint`` and the spectrum of every weight (``iter_spectrum``: read, ESD, fit, flags).

Prints both times, the ratio, peak memory of each process, and the largest differences between the two
sides' alpha, xmin, lambda_max and stable rank (the same figures, computed differently).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

SHAPES = (("attn.c_attn", 2304, 768), ("attn.c_proj", 768, 768), ("mlp.c_fc", 3072, 768),
          ("mlp.c_proj", 768, 3072))

_WW_SIDE = r"""
import contextlib, io, json, logging, resource, sys, time, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
path = sys.argv[1]
t0 = time.perf_counter()
import torch
sd = torch.load(path, weights_only=True)
with torch.device("meta"):
    model = torch.nn.ModuleDict({name.replace(".", "__")[:-len("__weight")]:
                                 torch.nn.Linear(t.shape[1], t.shape[0], bias=False) for name, t in sd.items()})
model.load_state_dict({k.replace(".", "__")[:-len("__weight")] + ".weight": v for k, v in sd.items()}, assign=True)
t1 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    import weightwatcher as ww
    details = ww.WeightWatcher(model=model).analyze(max_N=60000)
t2 = time.perf_counter()
rows = {r["longname"].replace("__", ".") + ".weight": [r["alpha"], r["xmin"], r["spectral_norm"], r["stable_rank"]]
        for _, r in details.iterrows()}
print(json.dumps({"load": t1 - t0, "analyze": t2 - t1, "total": t2 - t0, "rows": rows,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_OURS_SIDE = r"""
import json, resource, sys, time
path = sys.argv[1]
t0 = time.perf_counter()
from ckptview.core import open_checkpoint
from ckptview.core.figures.spectral import matrix_of, spectrum
ck = open_checkpoint(path)
rows = {}
for entry in ck.tensors():
    if matrix_of(entry.info) is not None:
        s = spectrum(entry.info)
        rows[entry.name] = [s.alpha, s.fit.xmin, s.lambda_max, s.stable_rank, s.method]
ck.close()
t1 = time.perf_counter()
print(json.dumps({"total": t1 - t0, "rows": rows,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def build(path: str, blocks: int) -> int:
    """Write the weights; returns the file's size."""
    import torch

    g = torch.Generator().manual_seed(0)
    sd = {}
    for b in range(blocks):
        for name, out, inp in SHAPES:
            sd[f"h.{b}.{name}.weight"] = torch.randn(out, inp, generator=g) * 0.02
    sd["lm_head.weight"] = torch.randn(50257, 768, generator=g) * 0.02
    torch.save(sd, path)
    return os.path.getsize(path)


_BUILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
import bench_spectral
print(bench_spectral.build(sys.argv[1], int(sys.argv[3])))
"""


def build_apart(path: str, blocks: int) -> int:
    """`build` in its own process: Linux keeps a process's peak RSS across fork and exec, so weights
    built here would count in both sides' peak memory."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", _BUILD, path, here, str(blocks)], check=True,
                         capture_output=True, text=True)
    return int(out.stdout.strip().splitlines()[-1])


def side(code: str, path: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, path], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12, help="transformer blocks (GPT-2 small: 12)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpt2_linear.pt")
        size = build_apart(path, args.blocks)
        print(f"{args.blocks * len(SHAPES) + 1} Linear weights, {size / 2**20:.0f} MiB float32")
        ours = side(_OURS_SIDE, path)
        theirs = side(_WW_SIDE, path)
    print(f"ckptview       {ours['total']:7.1f} s  (open, read, ESD, fit, flags)   peak {ours['peak_mb']:6.0f} MiB")
    print(f"WeightWatcher  {theirs['total']:7.1f} s  (torch.load {theirs['load']:.1f} s + analyze "
          f"{theirs['analyze']:.1f} s)   peak {theirs['peak_mb']:6.0f} MiB")
    print(f"ratio          {theirs['total'] / ours['total']:7.1f}x faster than load + analyze, "
          f"{theirs['analyze'] / ours['total']:.1f}x faster than analyze alone")
    common = sorted(set(ours["rows"]) & set(theirs["rows"]))
    methods = {ours["rows"][n][4] for n in common}
    diffs = [max(abs(ours["rows"][n][i] - theirs["rows"][n][i]) / abs(theirs["rows"][n][i]) for n in common)
             for i in range(4)]
    print(f"same figures on {len(common)} layers ({', '.join(sorted(methods))}): largest relative difference "
          f"alpha {diffs[0]:.1e}, xmin {diffs[1]:.1e}, lambda_max {diffs[2]:.1e}, stable rank {diffs[3]:.1e}")


if __name__ == "__main__":
    main()
