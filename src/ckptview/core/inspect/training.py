"""The training facts of a checkpoint: epoch, step, loss, schedulers, hyper-parameters, versions (Qt-free).

Everything here is metadata except one-element tensors (a saved ``loss``), which are read only when
``read_scalars`` is true (a few bytes each); the GUI calls it in a worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ckptview.core.checkpoint import Checkpoint, Node, PathKey, join_path
from ckptview.core.inspect.optimizer import is_optimizer_node, plain, scalar_value
from ckptview.core.inspect.roles import BUFFER_NAMES
from ckptview.core.read.pickle.to_tree import short_repr
from ckptview.core.units import plural

# Containers at the top of a checkpoint whose scalar leaves are training facts too (Lightning's
# ModelCheckpoint keeps best_model_score under "callbacks").
FACT_CONTAINERS = ("metrics", "train_state", "trainer_state", "training_state", "meta", "metadata", "info",
                   "extra_state", "stats", "callbacks")
HYPER_KEYS = ("hyper_parameters", "hparams", "hyperparameters", "datamodule_hyper_parameters", "config", "cfg",
              "args", "opt", "params")
MAX_ROWS = 500
MODULE_ATTRIBUTES = ("training",)  # attributes every torch.nn.Module has: no fact of a training run
_SCHEDULER_MARKS = {"base_lrs", "_last_lr", "_step_count"}


@dataclass
class SchedulerState:
    """An LR scheduler's state dict: where it is, what kind it looks like, its fields."""

    path: tuple[PathKey, ...]
    kind: str
    fields: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The contract name of the scheduler's node."""
        return join_path(self.path)


@dataclass
class TrainingSummary:
    """What a training checkpoint says about the run, beside its weights and optimizer state."""

    scalars: list[tuple[str, Any]] = field(default_factory=list)
    schedulers: list[SchedulerState] = field(default_factory=list)
    hyper_parameters: list[tuple[str, str]] = field(default_factory=list)
    versions: list[tuple[str, str]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        """True when the file holds none of these facts (a bare state dict)."""
        return not (self.scalars or self.schedulers or self.hyper_parameters or self.versions)


def training_summary(ckpt: Checkpoint | Node, read_scalars: bool = True) -> TrainingSummary:
    """Collect the training facts of a checkpoint."""
    root = ckpt.root if isinstance(ckpt, Checkpoint) else ckpt
    out = TrainingSummary()
    if root.kind not in ("dict", "object"):
        return out
    if root.type_name == "training-folder":
        _folder_summary(root, out, read_scalars)
        out.schedulers = find_schedulers(root)
        return out
    # A pickled torch.nn.Module (torch.save(model)): its attributes are the module's, `training` its mode.
    module = root.kind == "object" and any(c.key == "training" and c.kind == "value" and isinstance(c.value, bool)
                                           for c in root.children)
    for child in root.children:
        key = str(child.key)
        if module and key in MODULE_ATTRIBUTES:
            continue  # torch.save(model): the module's own state (train/eval mode), not the run's
        if _is_version(child):
            out.versions.append((key, str(child.value)))
        elif key in HYPER_KEYS and child.kind in ("dict", "object"):
            _flatten(child, key if key != "hyper_parameters" else "", out.hyper_parameters)
        elif key in FACT_CONTAINERS and child.kind in ("dict", "object"):
            _scalar_leaves(child, key, out, read_scalars, depth=2)
        elif not (child.kind == "tensor" and _model_tensor(key)):
            fact = _scalar(child, read_scalars)
            if fact is not None:
                out.scalars.append((key, fact))
    out.schedulers = find_schedulers(root)
    return out


def _model_tensor(key: str) -> bool:
    """A one-element tensor at the top that is a module's (`bn1.num_batches_tracked` of a state dict or a .pt2,
    a top-level module's `running_mean`), not a fact of the run."""
    return "." in key or key in BUFFER_NAMES


# trainer_state.json keys worth a row (the rest is in the tree), in this order.
TRAINER_STATE_KEYS = ("global_step", "epoch", "max_steps", "num_train_epochs", "best_metric",
                      "best_model_checkpoint", "best_global_step", "train_batch_size", "total_flos")


def _folder_summary(root: Node, out: TrainingSummary, read_scalars: bool) -> None:
    """A training folder: trainer_state.json first, training args as hyper-parameters, then each file's facts."""
    by_key = {str(c.key): c for c in root.children}
    state = by_key.get("trainer_state.json")
    if state is not None and state.kind == "dict":
        _trainer_state(state, out)
    for key, child in by_key.items():
        if key == "trainer_state.json" or child.kind not in ("dict", "object"):
            continue
        if key.startswith("training_args"):
            _flatten(child, "", out.hyper_parameters)
            continue
        if "model" in key.lower() and not key.endswith((".pt", ".pth", ".pkl")):
            continue  # weights: no training facts, and possibly many entries
        sub = training_summary(child, read_scalars)
        seen = {name for name, _ in out.scalars}
        out.scalars += [(name, v) for name, v in sub.scalars if name not in seen]
        out.hyper_parameters += sub.hyper_parameters
        out.versions += sub.versions


def _trainer_state(node: Node, out: TrainingSummary) -> None:
    """HF Trainer's ``trainer_state.json``: step, epoch, best metric, and the last logged lr and losses."""
    by_key = {str(c.key): c for c in node.children}
    for key in TRAINER_STATE_KEYS:
        child = by_key.get(key)
        if child is not None and child.kind == "value" and child.value is not None:
            out.scalars.append((key, child.value))
    history = by_key.get("log_history")
    if history is None or history.kind != "list":
        return
    latest: dict[str, Any] = {}
    for entry in history.children:  # later entries win: the values at the last logging step
        for c in entry.children:
            if c.kind == "value" and isinstance(c.value, (int, float)) and not isinstance(c.value, bool):
                latest[str(c.key)] = c.value
    for key in ("learning_rate", "loss", "grad_norm", *sorted(k for k in latest if k.startswith("eval_"))):
        if key in latest:
            out.scalars.append((f"log.{key}", latest[key]))


def _is_version(node: Node) -> bool:
    return (isinstance(node.key, str) and "version" in node.key.lower() and node.kind == "value"
            and isinstance(node.value, (str, int, float)) and not isinstance(node.value, bool))


def _scalar(node: Node, read_scalars: bool) -> Any:
    """A number, bool or short string for a scalar node; None for anything else."""
    if node.kind == "value":
        value = node.value
        if isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str) and len(value) <= 300:
            return value
        return None
    if node.kind == "tensor" and node.tensor is not None and node.tensor.numel == 1:
        info = node.tensor
        value = scalar_value(info) if read_scalars and not info.broken else None
        return value if value is not None else f"tensor {info.dtype} {list(info.shape)}"
    return None


def _scalar_leaves(node: Node, prefix: str, out: TrainingSummary, read_scalars: bool, depth: int) -> None:
    for child in node.children:
        if len(out.scalars) >= MAX_ROWS:
            return
        name = f"{prefix}.{child.key}"
        fact = _scalar(child, read_scalars)
        if fact is not None:
            out.scalars.append((name, fact))
        elif depth > 1 and child.kind in ("dict", "object") and not is_optimizer_node(child):
            _scalar_leaves(child, name, out, read_scalars, depth - 1)


def _flatten(node: Node, prefix: str, rows: list[tuple[str, str]], depth: int = 0) -> None:
    """Hyper-parameters as (dotted key, repr text) rows; short lists and tuples stay one row."""
    for child in node.children:
        if len(rows) >= MAX_ROWS:
            return
        key = f"{prefix}.{child.key}" if prefix else str(child.key)
        if child.kind in ("dict", "object") and child.children and depth < 4:
            _flatten(child, key, rows, depth + 1)
        else:
            rows.append((key, value_text(child)))


def value_text(node: Node) -> str:
    """A short repr of a node as Python would print the value (tuples as tuples)."""
    if node.kind == "value":
        return short_repr(node.value, 300)
    if node.kind == "tensor" and node.tensor is not None:
        info = node.tensor
        return f"tensor {info.dtype} {list(info.shape)}"
    if node.kind in ("list", "tuple") and len(node.children) <= 16:
        items = ", ".join(value_text(c) for c in node.children)
        if node.kind == "tuple":
            return f"({items},)" if len(node.children) == 1 else f"({items})"
        return f"[{items}]"
    return f"<{node.type_name} of {plural(len(node.children), 'item')}>"


# ---------------------------------------------------------------------------------------------------
# LR schedulers


def is_scheduler_node(node: Node) -> bool:
    """True for an LR scheduler's state dict (``last_epoch`` plus base/last lrs, or a plateau scheduler)."""
    if node.kind not in ("dict", "object"):
        return False
    keys = {c.key for c in node.children}
    return ("last_epoch" in keys and bool(_SCHEDULER_MARKS & keys)) or {"best", "num_bad_epochs", "patience"} <= keys


def scheduler_kind(keys: set[PathKey]) -> str:
    """The torch scheduler class a state dict most likely comes from (by its keys)."""
    rules = (
        ("_schedulers", "SequentialLR" if "_milestones" in keys else "ChainedScheduler"),
        ("milestones", "MultiStepLR"), ("T_0", "CosineAnnealingWarmRestarts"), ("T_max", "CosineAnnealingLR"),
        ("total_steps", "OneCycleLR"), ("max_lrs", "CyclicLR"), ("lr_lambdas", "LambdaLR"),
        ("patience", "ReduceLROnPlateau"), ("step_size", "StepLR"), ("power", "PolynomialLR"),
        ("start_factor", "LinearLR"), ("total_iters", "ConstantLR"), ("gamma", "ExponentialLR"),
    )
    for key, kind in rules:
        if key in keys:
            return kind
    return "scheduler"


def find_schedulers(root: Node) -> list[SchedulerState]:
    """Every LR scheduler state dict in the tree, with its fields as plain values."""
    out = []
    for node in root.walk():
        if not is_scheduler_node(node) or any(is_scheduler_node(a) for a in _ancestors(node)):
            continue
        fields: list[tuple[str, Any]] = []
        for child in node.children:
            key = str(child.key)
            if key == "_last_lr":
                fields.insert(0, ("last_lr", plain(child)))
            elif key == "_step_count":
                fields.append(("step_count", plain(child)))
            elif key.startswith("_") and key not in ("_milestones", "_schedulers"):
                continue  # torch bookkeeping (_is_initial, _get_lr_called_within_step)
            elif key == "milestones":
                fields.append((key, milestones(child)))
            else:
                fields.append((key, plain(child)))
        out.append(SchedulerState(node.path, scheduler_kind({c.key for c in node.children}), fields))
    return out


def milestones(node: Node) -> Any:
    """MultiStepLR keeps milestones in a ``collections.Counter`` stub: its keys, sorted."""
    if node.type_name == "collections.Counter":
        for sub in node.walk():
            if sub is not node and sub.kind == "dict":
                return sorted(c.key for c in sub.children if isinstance(c.key, int))
    return plain(node)


def _ancestors(node: Node) -> list[Node]:
    out = []
    parent = node.parent
    while parent is not None:
        out.append(parent)
        parent = parent.parent
    return out


# ---------------------------------------------------------------------------------------------------
# Short names for long fact keys


# Lightning's callback state keys: Name{init args}. `\b`: a name starts where a word does (tried at every
# position of a long run of letters, `\w*\{` made a search quadratic: 200,000 letters held the window).
_STATE_KEY = re.compile(r"\b([A-Za-z_]\w*)\{([^{}]*)\}")
MAX_SHORTENED = 4096  # characters of a key shortened at most; a longer one (no Lightning key) stays whole
_PAIR = re.compile(r"""'([^']*)'\s*:\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^,]+)""")


def short_fact_keys(keys: list[str]) -> list[str]:
    """Names a card can show for these fact keys: a Lightning callback's state key (``ModelCheckpoint{'monitor':
    'val_loss', 'mode': 'min', ...}``) keeps only the arguments that tell its callbacks apart
    (``ModelCheckpoint{monitor=val_loss}``, or ``ModelCheckpoint`` alone), and ``callbacks.`` goes. A key
    shortened into another's name stays whole."""
    differing: dict[str, set[str]] = {}  # callback class -> the argument names whose values differ
    seen: dict[str, list[dict[str, str]]] = {}
    for key in keys:
        if len(key) > MAX_SHORTENED:
            continue
        for name, body in _STATE_KEY.findall(key):
            args = {k: v.strip().strip("'\"") for k, v in _PAIR.findall(body)}
            if args not in seen.setdefault(name, []):
                seen[name].append(args)
    for name, variants in seen.items():
        every = {k for args in variants for k in args}
        differing[name] = {k for k in every if len({args.get(k) for args in variants}) > 1}

    def shorten(key: str) -> str:
        def one(match: re.Match[str]) -> str:
            name, body = match.group(1), match.group(2)
            args = {k: v.strip().strip("'\"") for k, v in _PAIR.findall(body)}
            kept = [f"{k}={args[k]}" for k in args if k in differing.get(name, set())]
            return f"{name}{{{', '.join(kept)}}}" if kept else name

        if len(key) > MAX_SHORTENED:
            return key
        return _STATE_KEY.sub(one, key.removeprefix("callbacks.") if _STATE_KEY.search(key) else key)

    short = [shorten(k) for k in keys]
    counts: dict[str, int] = {}
    for name in short + [k for k in keys]:
        counts[name] = counts.get(name, 0) + 1
    return [s if s == k or counts[s] == 1 else k for s, k in zip(short, keys, strict=True)]


def callback_fact(key: str) -> tuple[str, str] | None:
    """(the callback's state key, the field) of a Lightning callback's fact, else None:
    ``callbacks.ModelCheckpoint{'monitor': 'val_loss', ...}.best_model_path`` gives
    (``ModelCheckpoint{'monitor': 'val_loss', ...}``, ``best_model_path``); ``callbacks.Timer.time_elapsed``
    (``Timer``, ``time_elapsed``). A state key's arguments may hold dots (``'min_delta': 0.01``): the field
    starts after the closing brace."""
    rest = key.removeprefix("callbacks.")
    if rest == key:
        return None
    brace = rest.find("{")
    if brace >= 0 and "." in rest[:brace]:
        brace = -1  # a dotted name before any brace: the brace is the field's
    close = rest.find("}", brace) if brace >= 0 else -1
    head, dot, field_name = (rest[:close + 1], rest[close + 1:close + 2], rest[close + 2:]) if close >= 0 \
        else rest.partition(".")
    if dot != "." or not head or not field_name:
        return None
    return head, field_name

