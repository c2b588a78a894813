"""The checkpoints people open, built with their libraries, and a tour of every screen the window shows them.

Used by the layout test (tests/gui/app/test_screens.py) and by `make screenshots` (tools/screenshots.py), so
what is checked and what is pictured are the same screens. Each builder writes what its library writes:
a sharded `save_pretrained` Llama (transformers), a ResNet-18 state dict in torchvision's layout (its key
names and shapes, built with torch modules: torchvision is only in the vision venv), a training checkpoint
with Adam and StepLR, a Lightning file written by `Trainer.fit` and `Trainer.save_checkpoint`, a run of ten
checkpoints and a comparison of two of them. Sizes are small; the names and shapes are the real ones.

A checkpoint's Graph view (gui/graph/, `CheckpointTab.show_graph`) is visited beside each checkpoint's
side tabs wherever the window has one. Another main view adds itself to the tour by appending to
MAIN_VIEWS: a name and a function that opens it in the window and returns its widget once it has settled.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Wait = Callable[..., None]  # wait(condition, timeout_ms): process events until condition() holds
RUN_STEPS = (1, 5, 10, 15, 20, 25, 30, 35, 40, 50)


@dataclass
class Cases:
    """Paths of the built checkpoints, and what each one's tour selects in the tree."""

    llama: str
    resnet: str
    training: str
    lightning: str
    run: list[str] = field(default_factory=list)

    @property
    def checkpoints(self) -> list[tuple[str, str, str]]:
        """(name, path, tensor to select) of each checkpoint opened in a tab."""
        return [("llama", self.llama, "model.layers.1.self_attn.q_proj.weight"),
                ("resnet", self.resnet, "layer4.1.conv2.weight"),
                ("training", self.training, "model_state_dict.features.0.weight"),
                ("lightning", self.lightning, "state_dict.encoder.0.weight")]

    @property
    def compared(self) -> tuple[str, str]:
        """Two checkpoints of the run: before and after a layer was added (changed, only-B rows)."""
        return self.run[2], self.run[5]


# --- builders ------------------------------------------------------------------------------------------
def build_llama(folder: str) -> str:
    """`LlamaForCausalLM.save_pretrained` in shards of ~100 kB: an index and six safetensors files."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, max_shard_size="100KB")
    return folder


def resnet18_layout() -> Any:
    """A ResNet-18 with torchvision's module names (conv1, bn1, layer1..4 of BasicBlocks with downsample, fc)."""
    from torch import nn

    def block(inputs: int, outputs: int, stride: int) -> nn.Module:
        b = nn.Module()
        b.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        b.bn1 = nn.BatchNorm2d(outputs)
        b.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        b.bn2 = nn.BatchNorm2d(outputs)
        if stride != 1 or inputs != outputs:
            b.downsample = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))
        return b

    net = nn.Module()
    net.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
    net.bn1 = nn.BatchNorm2d(64)
    width = 64
    for i, channels in enumerate((64, 128, 256, 512), start=1):
        setattr(net, f"layer{i}", nn.Sequential(block(width, channels, 1 if i == 1 else 2),
                                                block(channels, channels, 1)))
        width = channels
    net.fc = nn.Linear(512, 1000)
    return net


def build_resnet(path: str) -> str:
    """`torch.save(resnet18().state_dict())` with torchvision's keys and shapes (11.7 M parameters)."""
    import torch

    torch.manual_seed(0)
    torch.save(resnet18_layout().state_dict(), path)
    return path


def small_cnn() -> Any:
    from torch import nn

    return nn.ModuleDict({"features": nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                                    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()),
                          "classifier": nn.Linear(32, 10)})


def build_training(path: str) -> str:
    """A training checkpoint: model, Adam and StepLR state after three epochs of two steps, epoch, loss."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = small_cnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    loss = torch.tensor(0.0)
    for _epoch in range(3):
        for _ in range(2):
            optimizer.zero_grad()
            features = model["features"](x).mean(dim=(2, 3))
            loss = nn.functional.cross_entropy(model["classifier"](features), y)
            loss.backward()
            optimizer.step()
        scheduler.step()
    torch.save({"epoch": 3, "model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(),
                "scheduler_state_dict": scheduler.state_dict(), "loss": float(loss)}, path)
    return path


def build_lightning(folder: str) -> str:
    """`Trainer.fit` for four steps (Adam, StepLR, a ModelCheckpoint callback), then `save_checkpoint`."""
    import lightning as L
    import torch
    from torch import nn

    class Classifier(L.LightningModule):
        def __init__(self, hidden: int = 32) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.encoder = nn.Sequential(nn.Linear(20, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.head = nn.Linear(hidden, 4)

        def training_step(self, batch: Any, _index: int) -> Any:
            x, y = batch
            loss = nn.functional.cross_entropy(self.head(self.encoder(x)), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)]

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 20), torch.randint(0, 4, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    callback = L.pytorch.callbacks.ModelCheckpoint(dirpath=os.path.join(folder, "checkpoints"), monitor="train_loss")
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[callback], default_root_dir=folder)
    trainer.fit(Classifier(), loader)
    path = os.path.join(folder, "epoch=0-step=4.ckpt")
    trainer.save_checkpoint(path)
    return path


def build_all(folder: str) -> Cases:
    """Every case, in `folder` (about 60 MB; the ResNet is most of it)."""
    from tests.support.series_run import make_run

    for name in ("llama", "lightning", "run"):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    return Cases(llama=build_llama(os.path.join(folder, "llama")),
                 resnet=build_resnet(os.path.join(folder, "resnet18.pth")),
                 training=build_training(os.path.join(folder, "training.pt")),
                 lightning=build_lightning(os.path.join(folder, "lightning")),
                 run=make_run(os.path.join(folder, "run"), RUN_STEPS))


# --- the tour ------------------------------------------------------------------------------------------
def settled(root: Any) -> Callable[[], bool]:
    """A condition: no job of the thread pool runs and no one-shot timer under `root` waits to fire
    (debounced plots and summaries start their work from such timers)."""
    from PySide6.QtCore import QThreadPool, QTimer

    def check() -> bool:
        if QThreadPool.globalInstance().activeThreadCount():
            return False
        return not any(t.isActive() and t.isSingleShot() for t in root.findChildren(QTimer))

    return check


def rest(wait: Wait, root: Any, timeout: int = 120_000) -> None:
    """Wait until `root` has settled twice in a row (a result arriving may start the next job)."""
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    check = settled(root)
    for _ in range(2):
        wait(check, timeout)
        for _ in range(3):  # results posted layout requests: deliver them before anything is measured
            QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
            QApplication.processEvents()


@dataclass
class Stop:
    """A screen to check or picture: its name ("llama/Statistics") and the main tab's page."""

    name: str
    page: Any


def checkpoint_stops(window: Any, name: str, path: str, select: str, wait: Wait) -> Iterator[Stop]:
    """A checkpoint's tab with `select` chosen: each side tab in turn; the tab is closed after."""
    (tab,) = window.open_paths([path])
    wait(lambda: tab.state != "loading", 60_000)
    assert tab.state == "ready", tab.error_text
    tab.expand_all()
    assert tab.select_name(select), select
    for i in range(tab.side_tabs.count()):
        title = tab.side_tabs.tabText(i)
        tab.side_tabs.setCurrentIndex(i)
        rest(wait, window)
        shown = tab.side_tabs.tabText(tab.side_tabs.currentIndex())
        assert shown == title, f"{name}: the {title} tab chosen, {shown} shown"  # the stop is what it says
        yield Stop(f"{name}/{title}", tab)
    yield from graph_stops(window, name, tab, wait)
    window.close_tab(window.tabs.indexOf(tab))


def graph_stops(window: Any, name: str, tab: Any, wait: Wait) -> Iterator[Stop]:
    """The tab's Graph view beside its tree, once laid out; none where the window has no Graph view yet."""
    show_graph = getattr(tab, "show_graph", None)  # gui/graph/ (issue 37) lands on its own branch
    if show_graph is None:
        return
    show_graph(True)
    rest(wait, window)
    yield Stop(f"{name}/Graph", tab)
    show_graph(False)
    rest(wait, window)


def series_stops(window: Any, paths: list[str], wait: Wait) -> Iterator[Stop]:
    """The run tab: each of its views, with the default selection."""
    tab = window.open_series([os.path.dirname(paths[0])])
    wait(lambda: tab.state != "loading", 120_000)
    assert tab.state == "ready", tab.summary_label.text()
    for i in range(tab.views.count()):
        tab.views.setCurrentIndex(i)
        rest(wait, window)
        assert tab.views.currentIndex() == i, tab.views.tabText(i)
        yield Stop(f"run/{tab.views.tabText(i)}", tab)
    window.close_tab(window.tabs.indexOf(tab))


def compare_stops(window: Any, a: str, b: str, wait: Wait) -> Iterator[Stop]:
    """The comparison of `a` and `b`, its first changed row selected (histograms shown)."""
    from ckptview.gui.compare.tab import open_diff

    view = open_diff(window, a, b)
    wait(lambda: not view.busy, 120_000)
    view.select_row(0)
    rest(wait, window)
    yield Stop("compare", view)
    window.close_tab(window.tabs.indexOf(view))


# Main views other than checkpoint tabs, the run and the comparison: (name, opener). An opener gets the
# window, the cases and `wait`, opens its view and returns its page once settled; the tour closes it.
MAIN_VIEWS: list[tuple[str, Callable[[Any, Cases, Wait], Any]]] = []


def tour(window: Any, cases: Cases, wait: Wait) -> Iterator[Stop]:
    """Every screen: each checkpoint with each side tab and its Graph view, the run's views, the comparison,
    MAIN_VIEWS."""
    for name, path, select in cases.checkpoints:
        yield from checkpoint_stops(window, name, path, select, wait)
    yield from series_stops(window, cases.run, wait)
    yield from compare_stops(window, *cases.compared, wait)
    for name, opener in MAIN_VIEWS:
        page = opener(window, cases, wait)
        rest(wait, window)
        yield Stop(name, page)
        window.close_tab(window.tabs.indexOf(page))
