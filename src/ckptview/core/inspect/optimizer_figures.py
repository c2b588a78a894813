"""Figures of optimizer state that read values: norms and Adam's effective step size (run in a worker)."""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptview.core.checkpoint import TensorInfo
from ckptview.core.errors import CheckpointError
from ckptview.core.figures.stats import Summary, iter_tensor_summary
from ckptview.core.inspect.optimizer import OptimizerState, param_step
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.values.reading import iter_chunks
from ckptview.core.read.values.repeats import stored_part

if TYPE_CHECKING:
    import numpy as np

EXACT_MEDIAN_LIMIT = 1 << 21  # above this many elements the effective-step median is taken from a sample

@dataclass
class ParamFigures:
    """Figures of one parameter's state: step, L2 norm of each state tensor, effective Adam step size."""

    index: int
    step: int | float | None = None
    norms: dict[str, float | None] = field(default_factory=dict)
    eff_median: float | None = None
    eff_max: float | None = None
    eff_sampled: bool = False  # the median comes from a systematic sample (tensor above EXACT_MEDIAN_LIMIT)
    error: str | None = None


SummaryJob = Callable[[TensorInfo, CancelToken], Generator[Progress, None, Summary]]


def _default_summary(info: TensorInfo, token: CancelToken) -> Generator[Progress, None, Summary]:
    return iter_tensor_summary(info, token)


def iter_figures(
    opt: OptimizerState, token: CancelToken | None = None, summary: SummaryJob | None = None,
    indices: Iterable[int] | None = None,
) -> Generator[Progress | ParamFigures, None, list[ParamFigures]]:
    """Per-parameter figures, one :class:`ParamFigures` yielded as each is done, Progress in between.

    ``summary`` computes a tensor's statistics (the GUI passes its cached job so histograms reuse them).
    """
    token = token or CancelToken()
    summary = summary or _default_summary
    chosen = [opt.params[i] for i in indices] if indices is not None else opt.params
    total = sum(info.numel for p in chosen for _, info in p.state_tensors()) or 1
    done = 0
    results = []
    for p in chosen:
        token.check()
        fig = ParamFigures(p.index, step=param_step(p))
        try:
            for key, info in p.state_tensors():
                s = yield from summary(info, token)
                fig.norms[key] = s.stats.l2 if s.stats.numel else None
                done += info.numel
                yield Progress(done, total, "optimizer figures")
            v = p.entry("max_exp_avg_sq") or p.entry("exp_avg_sq")
            group = opt.groups[p.group] if p.group is not None else {}
            if v is not None and v.tensor is not None:
                res = yield from iter_effective_step(v.tensor, group, fig.step, token)
                fig.eff_median, fig.eff_max, fig.eff_sampled = res
        except CheckpointError as exc:
            fig.error = str(exc)
        results.append(fig)
        yield fig
    return results


def iter_effective_step(
    v: TensorInfo, group: dict[str, Any], step: int | float | None, token: CancelToken | None = None,
    chunk_elems: int = 1 << 20, exact_limit: int = EXACT_MEDIAN_LIMIT,
) -> Generator[Progress, None, tuple[float | None, float | None, bool]]:
    """Median and max of lr / (sqrt(v / (1 - beta2**step)) + eps) over the second moment ``v``, streamed.

    The max is exact (the smallest finite ``v`` gives it). The median is exact up to ``exact_limit``
    elements; above, it is the median of a systematic sample of about ``exact_limit`` elements (every
    k-th element in C order). Returns (None, None, False) when lr, betas, eps or step are missing.
    """
    import numpy as np

    v = stored_part(v)[0]  # a view that repeats its storage: its stored elements, each once (same median, max)
    lr, eps, betas = group.get("lr"), group.get("eps"), group.get("betas")
    if not isinstance(lr, (int, float)) or not isinstance(eps, (int, float)) or not step:
        return None, None, False
    beta2 = betas[1] if isinstance(betas, list) and len(betas) > 1 and isinstance(betas[1], (int, float)) else None
    if beta2 is None:
        return None, None, False
    correction = 1.0 - float(beta2) ** float(step)
    if correction <= 0:
        return None, None, False
    stride = max(1, math.ceil(v.numel / exact_limit))
    kept: list[np.ndarray] = []
    v_min = math.inf
    pos = 0
    for chunk in iter_chunks(v, chunk_elems):
        if token is not None:
            token.check()
        x = np.asarray(chunk, dtype=np.float64).reshape(-1)
        finite = x[np.isfinite(x)]
        if finite.size:
            v_min = min(v_min, float(finite.min()))
        sample = x[(-pos) % stride::stride] if stride > 1 else x
        kept.append(sample[np.isfinite(sample)])
        pos += x.size
        yield Progress(pos, v.numel, "effective step")
    if not math.isfinite(v_min):
        return None, None, False
    values = np.concatenate(kept) if kept else np.empty(0)

    def eff(x: np.ndarray | float) -> Any:
        return float(lr) / (np.sqrt(np.maximum(x, 0.0) / correction) + float(eps))

    median = float(np.median(eff(values))) if values.size else None
    return median, float(eff(v_min)), stride > 1
