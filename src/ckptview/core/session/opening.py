"""The worker side of opening a checkpoint for a tab: read the metadata and derive what costs time.

Everything here runs in a worker thread, never on the GUI thread: parsing, grouping rows, sharing, counts,
the filter index and the summary figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.figures.analysis import Analysis
from ckptview.core.gc_policy import keep_out_of_collections
from ckptview.core.inspect.grouping import Row, group_tree
from ckptview.core.inspect.hf_order import OrderRequest, ParamOrders
from ckptview.core.inspect.optimizer import is_optimizer_node, label_state_rows, pending_orders
from ckptview.core.inspect.order_cache import ParamOrderCache
from ckptview.core.inspect.summary import SizeFacts, size_facts
from ckptview.core.inspect.training import training_summary
from ckptview.core.jobs import CancelToken, Progress
from ckptview.core.read.bytes.remote.options import RemoteOptions
from ckptview.core.read.context import ReaderContext
from ckptview.core.read.open import open_checkpoint
from ckptview.core.session.file_checks import Signature, safetensors_header_size, signature
from ckptview.core.session.workspace import Lease, Workspace
from ckptview.core.units import plural


@dataclass
class Opened:
    """What the worker hands the tab: the checkpoint and everything derived from it that costs time."""

    checkpoint: Checkpoint
    top: Row
    sharing: Mapping[str, list[str]]
    leaf_count: int
    facts: SizeFacts
    sharded: bool = False
    devices: frozenset[str] = frozenset({"cpu"})  # where the tensors were saved
    flat: list[Row] | None = None  # every row, for the filter index
    signature: Signature | None = None  # the file as it was when opened
    # What the file holds besides tensors, for the views that show only those (`FEATURES`): optimizer state,
    # training facts (epoch, loss, schedulers, hyper-parameters)
    features: frozenset[str] = frozenset()
    # The tab's hold on the checkpoint (the window's workspace shares it with comparisons and other
    # tabs): released, never closed, when the tab lets it go. Without one, the checkpoint is this tab's.
    lease: Lease | None = None
    # Parameter orders a library could tell and the orders handed down do not know yet: the optimizer's
    # names are marked guessed until the tab has them learned (`learn_orders`, in the background).
    pending: list[OrderRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.lease is None:
            self.lease = Lease.private(self.checkpoint)

    @property
    def held(self) -> Lease:
        """The hold on the checkpoint: its Analysis, and `release()` (closed when nothing else holds it)."""
        assert self.lease is not None  # set in __post_init__
        return self.lease

    @property
    def analysis(self) -> Analysis:
        """The checkpoint's Analysis (shared by everything that holds the checkpoint)."""
        return self.held.analysis

    def release(self) -> None:
        """Let go of the checkpoint (closed when nothing else holds it); once."""
        self.held.release()


PROGRESS_INTERVAL = 0.1  # seconds between two progress steps handed to the GUI thread
OPTIMIZER, TRAINING = "optimizer", "training"  # `Opened.features`


def features_of(checkpoint: Checkpoint) -> frozenset[str]:
    """What `checkpoint` holds that only some views show: optimizer state, training facts (metadata only)."""
    found = set()
    if any(is_optimizer_node(node) for node in checkpoint.root.walk()):
        found.add(OPTIMIZER)
    if not training_summary(checkpoint, read_scalars=False).is_empty:
        found.add(TRAINING)
    return frozenset(found)


class LargeHeader(Exception):
    """The file's header is larger than the window opens without asking (not an error: a question)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"header of {size:,} bytes")
        self.size = size


def prepare(checkpoint: Checkpoint, token: CancelToken | None = None, lease: Lease | None = None,
            orders: ParamOrders | None = None) -> Opened:
    """Group rows, sharing, counts and the filter index for `checkpoint` (O(tensors): off the GUI thread).

    `token` is checked between the steps (each takes seconds at a million tensors). `orders`: the parameter
    orders learned before, which name a Trainer folder's optimizer state (never learned here: `pending`).
    """
    check = token.check if token is not None else lambda: None
    facts = size_facts(checkpoint)  # which tensors are the model's parameters: the tree's column counts them
    check()
    top = group_tree(checkpoint.root, checkpoint.warnings, facts.counted)
    check()
    label_state_rows(top, checkpoint, orders)  # optimizer state named by parameter: "exp_avg of encoder.0.weight"
    pending = pending_orders(checkpoint, orders) if orders is not None else []
    check()
    flat = list(top.walk())
    leaves = sum(1 for r in flat if not r.children and r is not top)
    tensors = checkpoint.tensors()
    check()
    # A Shard column says something where the tensors lie in more than one file (one file: no column).
    sharded = len({str(s.get("file")) for e in tensors for s in e.info.extra.get("shards", ())
                   if isinstance(s, dict)}) > 1
    devices = frozenset(e.info.device for e in tensors)
    features = features_of(checkpoint)
    check()
    return Opened(checkpoint, top, checkpoint.sharing(), leaves, facts, sharded, flat=flat,
                  devices=devices, lease=lease, pending=pending, features=features)


def learn_orders(opened: Opened, orders: ParamOrderCache) -> int:
    """Learn the parameter orders `opened` waits for (a library model built in a child process each:
    seconds) into `orders`, then name its optimizer state rows again; how many were learned. Off the GUI
    thread: the tab shows its tree meanwhile, the names marked guessed."""
    learned = orders.learn(opened.pending)
    label_state_rows(opened.top, opened.checkpoint, orders)
    opened.pending = pending_orders(opened.checkpoint, orders)
    return learned


def open_and_prepare(path: str, header_limit: int | None = None, token: CancelToken | None = None,
                     progress: Callable[[Progress], None] | None = None,
                     workspace: Workspace | None = None, remote: RemoteOptions | None = None) -> Opened:
    """Worker side of opening: read the metadata and build the display rows (never on the GUI thread).

    The checkpoint comes from `workspace` (the window's): a file already open in the window and unchanged
    is not read again; without one it is opened for the caller alone. The caller releases `Opened.lease`
    when done.

    Raises LargeHeader, before reading it, for a safetensors header above `header_limit` bytes. A
    safetensors header is read in pieces: `progress` gets each piece's Progress, and `token` stops the
    read between two pieces (Cancelled). `remote`: the remote options of this open, when not the
    workspace's (the window's "Download and open": a file whose server ignores range requests downloaded
    whole, its pieces reported to `progress`, stopped by `token`).
    """
    if header_limit is not None:
        size = safetensors_header_size(path)
        if size is not None and size > header_limit:
            raise LargeHeader(size)

    shown = [0.0]  # when a step was last handed on

    def report(step: Progress) -> None:
        # At most ten steps a second: each is a queued call into Python on the GUI thread, and one per
        # piece (every few ms) kept that thread busy waiting for the interpreter lock (1.6 s, no timer ran).
        now = time.monotonic()
        if progress is not None and (now - shown[0] >= PROGRESS_INTERVAL or step.done >= step.total):
            shown[0] = now
            progress(step)

    before = signature(path)  # taken first: a change during the open still shows as a change later
    # The caller holds the GUI thread's collector off meanwhile (checkpoint_tab: a pass over a growing tree,
    # on the GUI thread, was the window's longest pause on a 900,000-tensor header).
    try:
        if remote is None:
            remote = workspace.remote if workspace is not None else RemoteOptions()
        context = ReaderContext(cancel=token, progress=report, remote=remote)
        lease = (workspace.acquire(path, lambda p: open_checkpoint(p, context)) if workspace is not None
                 else Lease.private(open_checkpoint(path, context)))
    except CheckpointError:
        if token is not None and token.cancelled:  # the reader turns every exception into one line
            raise Cancelled("cancelled") from None
        raise
    checkpoint = lease.checkpoint
    if progress is not None:
        progress(Progress(0, 0, f"arranging {plural(len(checkpoint.root.children), 'entry', 'entries')}"))
    try:
        opened = prepare(checkpoint, token, lease, workspace.orders if workspace is not None else None)
    except BaseException:
        lease.release()
        raise
    opened.signature = before
    # Freeze the new tree here, in the worker: millions of fresh objects would otherwise make the GUI
    # thread's next collection (gc_guard) walk them all before the page is built (2 s at 900,000 tensors).
    keep_out_of_collections()
    return opened
