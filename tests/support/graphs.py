"""Synthetic model graphs shaped like real ones, for the graph view's tests and benchmarks.

`llama_program(layers)` is a Llama-like exported program in the `ModelGraph` form the core's sources yield:
ATen ops as `torch.export` writes them after `run_decompositions()` (a linear is permute + view + mm + view,
attention is matmul/softmax), each op placed in its module (`model.layers.3.self_attn.q_proj`), the
parameters on the ops that read them, rotary cos/sin and the causal mask computed once at the top and read
by every layer (the long edges a real program has). About 93 nodes a layer: 215 layers make ~20,000 nodes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ckptview.core.graph import GraphNode, ModelGraph

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, SEQ = 8192, 64, 8, 28672, 128256, 16
HEAD = HIDDEN // HEADS


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []
        self._count: dict[str, Iterator[int]] = {}

    def op(self, op: str, module: str, *inputs: str, params: tuple[str, ...] = (),
           shape: tuple[int | str, ...] | None = None, dtype: str | None = "bfloat16") -> str:
        base = op.split(".")[1] if op.startswith("aten.") else op
        n = next(self._count.setdefault(base, itertools.count()))
        node_id = base if n == 0 else f"{base}_{n}"
        self.nodes.append(GraphNode(node_id, op, module, tuple(inputs), params, shape, dtype))
        return node_id

    def linear(self, module: str, x: str, out: int, bias: bool = False) -> str:
        params = (f"{module}.weight",) + ((f"{module}.bias",) if bias else ())
        t = self.op("aten.permute.default", module, x, params=params[:1])
        v = self.op("aten.view.default", module, x, shape=(SEQ, HIDDEN))
        mm = self.op("aten.addmm.default" if bias else "aten.mm.default", module, v, t, params=params[1:],
                     shape=(SEQ, out))
        return self.op("aten.view.default", module, mm, shape=(1, SEQ, out))

    def rms_norm(self, module: str, x: str) -> str:
        f = self.op("aten._to_copy.default", module, x, dtype="float32")
        p = self.op("aten.pow.Tensor_Scalar", module, f, dtype="float32")
        m = self.op("aten.mean.dim", module, p, dtype="float32")
        a = self.op("aten.add.Tensor", module, m, dtype="float32")
        r = self.op("aten.rsqrt.default", module, a, dtype="float32")
        y = self.op("aten.mul.Tensor", module, f, r, dtype="float32")
        c = self.op("aten._to_copy.default", module, y)
        return self.op("aten.mul.Tensor", module, c, params=(f"{module}.weight",), shape=(1, SEQ, HIDDEN))

    def rotate(self, module: str, x: str, cos: str, sin: str) -> str:
        xc = self.op("aten.mul.Tensor", module, x, cos)
        s1 = self.op("aten.slice.Tensor", module, x)
        s2 = self.op("aten.slice.Tensor", module, x)
        ng = self.op("aten.neg.default", module, s2)
        ct = self.op("aten.cat.default", module, ng, s1)
        xs = self.op("aten.mul.Tensor", module, ct, sin)
        return self.op("aten.add.Tensor", module, xc, xs)

    def repeat_kv(self, module: str, x: str) -> str:
        u = self.op("aten.unsqueeze.default", module, x)
        e = self.op("aten.expand.default", module, u)
        c = self.op("aten.clone.default", module, e)
        return self.op("aten.view.default", module, c, shape=(1, HEADS, SEQ, HEAD))

    def attention(self, module: str, q: str, k: str, v: str, mask: str) -> str:
        s = self.op("aten.mul.Scalar", module, q)
        kt = self.op("aten.transpose.int", module, k)
        qe = self.op("aten.expand.default", module, s)
        qv = self.op("aten.view.default", module, qe)
        ke = self.op("aten.expand.default", module, kt)
        kv = self.op("aten.view.default", module, ke)
        b1 = self.op("aten.bmm.default", module, qv, kv)
        w = self.op("aten.view.default", module, b1, shape=(1, HEADS, SEQ, SEQ))
        wm = self.op("aten.add.Tensor", module, w, mask)
        sm = self.op("aten._softmax.default", module, wm, dtype="float32")
        se = self.op("aten.expand.default", module, sm)
        sv = self.op("aten.view.default", module, se)
        ve = self.op("aten.expand.default", module, v)
        vv = self.op("aten.view.default", module, ve)
        b2 = self.op("aten.bmm.default", module, sv, vv)
        return self.op("aten.view.default", module, b2, shape=(1, HEADS, SEQ, HEAD))

    def layer(self, prefix: str, x: str, cos: str, sin: str, mask: str) -> str:
        h = self.rms_norm(f"{prefix}.input_layernorm", x)
        att = f"{prefix}.self_attn"
        heads = []
        for proj, width in (("q_proj", HIDDEN), ("k_proj", KV_HEADS * HEAD), ("v_proj", KV_HEADS * HEAD)):
            y = self.linear(f"{att}.{proj}", h, width)
            y = self.op("aten.view.default", att, y)
            heads.append(self.op("aten.transpose.int", att, y))
        q = self.rotate(att, heads[0], cos, sin)
        k = self.repeat_kv(att, self.rotate(att, heads[1], cos, sin))
        v = self.repeat_kv(att, heads[2])
        o = self.attention(att, q, k, v, mask)
        o = self.op("aten.transpose.int", att, o)
        o = self.op("aten.clone.default", att, o)
        o = self.op("aten.view.default", att, o, shape=(1, SEQ, HIDDEN))
        o = self.linear(f"{att}.o_proj", o, HIDDEN)
        x = self.op("aten.add.Tensor", prefix, x, o, shape=(1, SEQ, HIDDEN))
        h = self.rms_norm(f"{prefix}.post_attention_layernorm", x)
        mlp = f"{prefix}.mlp"
        g = self.linear(f"{mlp}.gate_proj", h, FFN)
        g = self.op("aten.silu.default", mlp, g)
        u = self.linear(f"{mlp}.up_proj", h, FFN)
        m = self.op("aten.mul.Tensor", mlp, g, u)
        d = self.linear(f"{mlp}.down_proj", m, HIDDEN)
        return self.op("aten.add.Tensor", prefix, x, d, shape=(1, SEQ, HIDDEN))


def llama_program(layers: int = 2, source: str = "exported-program") -> ModelGraph:
    """A Llama-like decomposed program of `layers` decoder layers (about 93 nodes each, 40 around them)."""
    b = _Builder()
    ids = b.op("input", "", shape=(1, SEQ), dtype="int64")
    x = b.op("aten.embedding.default", "model.embed_tokens", ids, params=("model.embed_tokens.weight",),
             shape=(1, SEQ, HIDDEN))
    rot = "model.rotary_emb"
    ar = b.op("aten.arange.start", "model", dtype="int64")
    pos = b.op("aten.unsqueeze.default", "model", ar)
    inv = b.op("aten.unsqueeze.default", rot, params=("model.rotary_emb.inv_freq",), dtype="float32")
    ie = b.op("aten.expand.default", rot, inv, dtype="float32")
    pf = b.op("aten._to_copy.default", rot, pos, dtype="float32")
    fr = b.op("aten.bmm.default", rot, ie, pf, dtype="float32")
    ft = b.op("aten.transpose.int", rot, fr, dtype="float32")
    emb = b.op("aten.cat.default", rot, ft, ft, dtype="float32")
    cos = b.op("aten._to_copy.default", rot, b.op("aten.cos.default", rot, emb, dtype="float32"))
    sin = b.op("aten._to_copy.default", rot, b.op("aten.sin.default", rot, emb, dtype="float32"))
    full = b.op("aten.full.default", "model", dtype="float32")
    tri = b.op("aten.triu.default", "model", full, dtype="float32")
    gt = b.op("aten.gt.Tensor", "model", ar, pos, dtype="bool")
    mask = b.op("aten.mul.Tensor", "model", tri, gt, shape=(1, 1, SEQ, SEQ), dtype="float32")
    for i in range(layers):
        x = b.layer(f"model.layers.{i}", x, cos, sin, mask)
    x = b.rms_norm("model.norm", x)
    logits = b.linear("lm_head", x, VOCAB)
    b.op("output", "", logits)
    return ModelGraph(source, b.nodes)


def layers_for(nodes: int) -> int:
    """How many layers make a program of about `nodes` nodes."""
    return max(1, round((nodes - len(llama_program(0).nodes)) / (len(llama_program(1).nodes)
                                                                  - len(llama_program(0).nodes))))


def llama_keys(layers: int) -> list[str]:
    """The state-dict keys of `llama_program(layers)`, as a checkpoint of it would hold them."""
    seen: dict[str, None] = {}
    for node in llama_program(layers).nodes:
        for key in node.params:
            seen.setdefault(key)
    return list(seen)
