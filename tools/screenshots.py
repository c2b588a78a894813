"""`make screenshots`: render the window offscreen to PNG: the README's pictures, and every screen to look at.

README pictures (--out, default docs/screenshots, at --size, light palette): the README's MLP after a few
Adam steps and the same model later for the comparison, saved as `tree.png`, `statistics.png`,
`optimizer.png`, `heatmap.png`, `spectrum.png`, `run.png`, `series.png` (a training loop's logged loss and
learning rate beside its checkpoints), `diff.png`, `graph.png` (a tiny Llama's architecture view, traced on
meta) and `graph-layer.png` (one of its decoder layers opened).

The tour (--tour DIR): the checkpoints of the layout test (tests/support/screens.py: a sharded Llama, a
torchvision-layout ResNet, Adam + StepLR training, a Lightning file, a run of ten checkpoints, a
comparison), every side tab, run view and the comparison, at 1024x640 and 1280x800, light and dark:
`DIR/<width>x<height>-<palette>/<screen>.png`, one window per size and palette. Look at them before a stop.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("CKPTVIEW_SERVER_NAME", f"ckptview-screenshots-{os.getpid()}")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = ((1024, 640), (1280, 800))
PALETTES = ("light", "dark")


def make_checkpoints(folder: str) -> tuple[str, str]:
    """Two training checkpoints of the README's MLP, 5 and 25 Adam steps in."""
    import torch
    from torch import nn

    from ckptview.core.worker.example_model import build_mlp

    torch.manual_seed(0)
    model = build_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    inputs, targets = torch.randn(64, 20), torch.randint(0, 10, (64,))
    paths = []
    for steps, name in ((5, "mlp_step5.pth"), (20, "mlp_step25.pth")):
        for _ in range(steps):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
        path = os.path.join(folder, name)
        torch.save({"model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(),
                    "epoch": len(paths) * 20 + 5, "loss": loss.item()}, path)
        paths.append(path)
    return paths[0], paths[1]


def make_llama(folder: str) -> str:
    """A tiny Llama saved with save_pretrained (its graph is traced on meta in the worker); the README's MLP
    exported as a .pt2 when transformers is not installed."""
    import torch

    torch.manual_seed(0)
    try:
        import transformers
    except ImportError:
        from ckptview.core.worker.example_model import build_mlp

        path = os.path.join(folder, "mlp.pt2")
        torch.export.save(torch.export.export(build_mlp().eval(), (torch.randn(2, 20),)), path)
        return path
    path = os.path.join(folder, "tiny-llama")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


def make_logged_run(folder: str) -> str:
    """A plain training loop's run: Adam + StepLR for 60 steps, a checkpoint every 10 (`step_N.pt` with its
    step, loss and optimizer), and the loss and learning rate of every step in a TensorBoard event file
    beside them (when tensorboard is installed)."""
    import torch
    from torch import nn

    from ckptview.core.worker.example_model import build_mlp

    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    model = build_mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    inputs, targets = torch.randn(256, 20), torch.randint(0, 10, (256,))
    try:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(os.path.join(folder, "logs"))
    except ImportError:
        writer = None
    for step in range(1, 61):
        batch = slice((step * 32) % 256, (step * 32) % 256 + 32)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs[batch]), targets[batch])
        loss.backward()
        optimizer.step()
        scheduler.step()
        if writer is not None:
            writer.add_scalar("train/loss", loss.item(), step)
            writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
        if step % 10 == 0:
            torch.save({"step": step, "model_state_dict": model.state_dict(),
                        "optimizer_state_dict": optimizer.state_dict(), "scheduler_state_dict": scheduler.state_dict(),
                        "loss": loss.item()}, os.path.join(folder, f"step_{step}.pt"))
    if writer is not None:
        writer.close()
    return folder


def waiter(app: object) -> Callable[..., None]:
    """wait(condition, timeout_ms): process events until `condition()` holds (an error after the timeout)."""
    def wait(condition: Callable[[], bool], timeout: int = 60_000) -> None:
        deadline = time.monotonic() + timeout / 1000
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("the window did not settle")
            app.processEvents()  # type: ignore[attr-defined]
            time.sleep(0.01)

    return wait


def window(settings_dir: str, size: tuple[int, int], palette: str, wait: Callable[..., None]):  # noqa: ANN201
    """A shown MainWindow of `size` in `palette`, with settings of its own."""
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.settings import Settings

    settings = Settings(os.path.join(settings_dir, f"settings-{size[0]}-{palette}.ini"))
    settings.set_palette(palette)
    win = MainWindow(settings)
    win.resize(*size)
    win.show()
    wait(lambda: (win.width(), win.height()) == size)
    return win


def readme_pictures(out: str, size: tuple[int, int], tmp: str, wait: Callable[..., None]) -> None:
    """The README's pictures of the MLP, in the light palette."""
    from tests.support.screens import rest

    from ckptview.gui.compare.tab import open_diff

    first, second = make_checkpoints(tmp)
    win = window(tmp, size, "light", wait)
    (tab,) = win.open_paths([first])
    wait(lambda: tab.state != "loading")
    tab.select_name("model_state_dict.hidden.weight")

    def shoot(name: str, title: str | None = None) -> None:
        if title is not None:
            panel = tab.show_panel(title)
            if title == "Optimizer" and panel is not None:
                panel.start_figures()
        rest(wait, win)
        path = os.path.join(out, f"{name}.png")
        win.grab().save(path)
        print(path)

    shoot("tree", "Statistics")
    shoot("spectrum", "Spectrum")
    shoot("heatmap", "Heat-map")
    shoot("optimizer", "Optimizer")
    tab.show_panel("Statistics")
    tab.select_name("model_state_dict")
    shoot("statistics")
    # The run picture: the bundled example (the window's start file) after one click on Run.
    (example,) = win.open_paths([os.path.join(ROOT, "src", "ckptview", "resources", "example.pth")])
    wait(lambda: example.state != "loading")
    panel = example.show_panel("Run")
    assert panel is not None
    wait(lambda: panel.run_button.isEnabled(), timeout=120_000)
    done: list[object] = []
    panel.runFinished.connect(done.append)
    panel.runFailed.connect(done.append)
    panel.run_button.click()
    wait(lambda: bool(done), timeout=600_000)
    rest(wait, win)
    path = os.path.join(out, "run.png")
    win.grab().save(path)
    print(path)
    # The series picture: a run's logged loss and learning rate beside its checkpoints, one of them chosen.
    series = win.open_series([make_logged_run(os.path.join(tmp, "logged-run"))])
    wait(lambda: series.state != "loading", timeout=120_000)
    series.views.setCurrentWidget(series.scalars)
    series.scalars.choose_step(30)
    rest(wait, win)
    path = os.path.join(out, "series.png")
    win.grab().save(path)
    print(path)
    win.tabs.setCurrentWidget(tab)
    view = open_diff(win, first, second)
    wait(lambda: not view.busy)
    view.select_row(0)
    rest(wait, win)
    path = os.path.join(out, "diff.png")
    win.grab().save(path)
    print(path)
    (llama,) = win.open_paths([make_llama(tmp)])
    wait(lambda: llama.state != "loading")
    graph = llama.show_graph(True)
    assert graph is not None
    wait(lambda: graph.view is not None, timeout=600_000)
    # The architecture view it opens with: the blocks in order, the decoder layers folded "x 4", coloured.
    graph.overlay_box.setCurrentIndex(graph.overlay_box.findText("L2 norm"))
    wait(lambda: graph.coloured is not None and graph.coloured.view is graph.view)
    weight = next((k for k in graph.hierarchy.readers if k.endswith("embed_tokens.weight")),
                  next(iter(graph.hierarchy.readers)))
    llama.select_name(weight)
    wait(lambda: not graph.layout_slot.running and not graph.overlay_slot.running)
    rest(wait, win)
    path = os.path.join(out, "graph.png")
    win.grab().save(path)
    print(path)
    # A decoder layer opened: its blocks, the tensors' shapes on the edges.
    run = next((i for i in graph.view.items if i.repeat > 1), None)
    if run is not None:
        graph.expand(run.path)
        wait(lambda: run.path in graph.state.expanded and not graph.layout_slot.running)
        graph.canvas.set_zoom(1.0)
        graph.canvas.centre_on(graph.scene.boxes[graph.view.index()[run.key]].rect()
                               if run.key in graph.view.index() else graph.scene.sceneRect())
        wait(lambda: not graph.overlay_slot.running)
        rest(wait, win)
        path = os.path.join(out, "graph-layer.png")
        win.grab().save(path)
        print(path)
    win.close()


def tour_pictures(out: str, tmp: str, wait: Callable[..., None]) -> None:
    """Every screen of the layout test at both sizes, in both palettes."""
    from tests.support.screens import build_all, tour

    with warnings.catch_warnings():  # Trainer.fit's advice on data loaders is not ours to heed
        warnings.simplefilter("ignore")
        cases = build_all(os.path.join(tmp, "cases"))
    for size in SIZES:
        for palette in PALETTES:
            folder = os.path.join(out, f"{size[0]}x{size[1]}-{palette}")
            os.makedirs(folder, exist_ok=True)
            win = window(tmp, size, palette, wait)
            for stop in tour(win, cases, wait):
                path = os.path.join(folder, stop.name.replace("/", "_").replace(" ", "_") + ".png")
                win.grab().save(path)
                print(path)
            win.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/screenshots", help="folder of the README's pictures")
    parser.add_argument("--size", default="1280x800", help="WIDTHxHEIGHT of the README's pictures")
    parser.add_argument("--tour", metavar="DIR", help="also render every screen, both sizes and palettes, here")
    parser.add_argument("--no-readme", action="store_true", help="leave the README's pictures as they are")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    sys.path.insert(0, ROOT)  # tests.support.screens: the layout test's checkpoints and tour

    from ckptview.gui.app.launch import application
    from ckptview.gui.base.palette import apply_palette
    from ckptview.gui.base.workers import wait_for_workers

    app = application()
    wait = waiter(app)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if not args.no_readme:
                os.makedirs(args.out, exist_ok=True)
                readme_pictures(args.out, (width, height), tmp, wait)
            if args.tour:
                tour_pictures(args.tour, tmp, wait)
        finally:
            apply_palette("system")
            app.processEvents()
            wait_for_workers(30_000, quit_first=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
