"""A logger's ``hparams.yaml`` (Lightning's TensorBoard and CSV loggers write one beside their events) as
hyper-parameters: dotted names and short value texts (Qt-free).

Read with PyYAML's safe loader only (no tag builds an object: ``!!python/object`` is refused), whole up to
`MAX_BYTES`, and walked with an explicit stack that charges the budget of the file's bytes per node
visited: aliases let a few hundred bytes describe a tree of billions of nodes, and the budget refuses it.
"""

from __future__ import annotations

from typing import Any

from ckptview.core.budget import Budget
from ckptview.core.jobs import CancelToken
from ckptview.core.read.bytes.fs import FileSystem
from ckptview.core.read.pickle.to_tree import short_repr
from ckptview.core.units import plural

HPARAMS = "hparams.yaml"
MAX_BYTES = 16 << 20
MAX_DEPTH = 16  # nesting shown as dotted names; deeper containers are one short text


class HparamsError(ValueError):
    """An hparams.yaml that cannot be read safely (too large, not YAML, an unsafe tag, too much work)."""


def read_hparams(path: str, fs: FileSystem, token: CancelToken | None = None) -> list[tuple[str, str]]:
    """(dotted name, value text) of every leaf of the YAML mapping at `path`, in file order."""
    try:
        import yaml
    except ImportError:
        raise HparamsError("PyYAML is not installed (pip install 'ckptview[series]')") from None
    size = fs.getsize(path)
    if size > MAX_BYTES:
        raise HparamsError(f"{size:,} bytes, more than the {MAX_BYTES:,} read of an hparams.yaml")
    budget = Budget.for_stored(size, f"{HPARAMS} {path}", cancel=token)
    with fs.open_regular(path) as fh:
        raw = fh.read(MAX_BYTES + 1)
    budget.charge(len(raw), "bytes parsed")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(raw, Loader=loader)  # noqa: S506 - a safe loader: no tag builds an object
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise HparamsError(f"not safe YAML: {reason[:200]}") from None
    return flatten(data, budget)


def flatten(data: Any, budget: Budget) -> list[tuple[str, str]]:
    """(dotted name, value text) of the leaves of `data`, each node visited charged to `budget`."""
    out: list[tuple[str, str]] = []
    if not isinstance(data, dict):
        return [] if data is None else [("", short_repr(data, 300))]
    stack: list[tuple[str, Any, int]] = [(str(k), v, 1) for k, v in reversed(list(data.items()))]
    while stack:
        name, value, depth = stack.pop()
        budget.charge(1, "hyper-parameters")
        if isinstance(value, dict) and value and depth < MAX_DEPTH:
            budget.charge(len(value), "hyper-parameters")
            stack.extend((f"{name}.{k}", v, depth + 1) for k, v in reversed(list(value.items())))
        else:
            text = _short_list(value, budget) if isinstance(value, (list, tuple)) else short_repr(value, 300)
            budget.charge(len(name) + len(text), "hyper-parameters")  # what is kept: names and texts copied
            out.append((name, text))
    return out


def _short_list(items: list[Any] | tuple[Any, ...], budget: Budget) -> str:
    """A list as a short text; its containers named by their size, not walked (an alias bomb stays cheap)."""
    parts = []
    for item in items[:16]:
        budget.charge(1, "hyper-parameters")
        parts.append(f"<{plural(len(item), 'item')}>" if isinstance(item, (list, tuple, dict)) else short_repr(item, 60))
    more = f", ... {len(items) - 16} more" if len(items) > 16 else ""
    return "[" + ", ".join(parts) + more + "]"
