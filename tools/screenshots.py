"""`make screenshots`: render the main views offscreen to PNG, so the README's pictures stay current.

Builds its checkpoints with torch in a temporary folder (the README's MLP after a few Adam steps, and the
same model a few steps later for the comparison), opens them in a real window with QT_QPA_PLATFORM=offscreen,
waits for each view to finish its work, and saves `tree.png`, `statistics.png`, `optimizer.png`,
`diff.png`, `run.png` and `graph.png` (a tiny Llama's graph, traced on meta) into --out (default docs/screenshots) at --size (default 1280x800).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("CKPTVIEW_SERVER_NAME", f"ckptview-screenshots-{os.getpid()}")


def make_checkpoints(folder: str) -> tuple[str, str]:
    """Two training checkpoints of the README's MLP, 5 and 25 Adam steps in."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "resources"))
    import torch
    from make_example import MLP  # type: ignore[import-not-found]
    from torch import nn

    torch.manual_seed(0)
    model = MLP()
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
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "resources"))
        from make_example import MLP  # type: ignore[import-not-found]

        path = os.path.join(folder, "mlp.pt2")
        torch.export.save(torch.export.export(MLP().eval(), (torch.randn(2, 20),)), path)
        return path
    path = os.path.join(folder, "tiny-llama")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


def wait_until(app, condition, timeout: float = 60.0) -> None:
    """Process events until `condition()` holds (or the timeout passes)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    for _ in range(20):  # let layouts and repaints settle
        app.processEvents()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/screenshots")
    parser.add_argument("--size", default="1280x800", help="WIDTHxHEIGHT of the window")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    os.makedirs(args.out, exist_ok=True)

    from ckptview.gui.app.launch import application
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.settings import Settings
    from ckptview.gui.compare.tab import open_diff

    app = application()
    with tempfile.TemporaryDirectory() as tmp:
        first, second = make_checkpoints(tmp)
        window = MainWindow(Settings(os.path.join(tmp, "settings.ini")))
        window.resize(width, height)
        window.show()
        (tab,) = window.open_paths([first])
        wait_until(app, lambda: tab.state != "loading")
        titles = [tab.side_tabs.tabText(i) for i in range(tab.side_tabs.count())]

        def shoot(name: str) -> None:
            path = os.path.join(args.out, f"{name}.png")
            window.grab().save(path)
            print(path)

        def side(title: str):
            tab.side_tabs.setCurrentIndex(titles.index(title))
            return tab.panel(title)

        tab.select_name("model_state_dict.hidden.weight")
        stats = side("Statistics")
        wait_until(app, lambda: not stats.slot.running and not stats.histogram.slot.running)
        shoot("tree")
        spectrum = side("Spectrum")
        wait_until(app, lambda: not spectrum.slot.running)
        shoot("spectrum")
        side("Heat-map")
        wait_until(app, lambda: side("Heat-map").heatmap is not None)
        shoot("heatmap")
        optimizer = side("Optimizer")
        optimizer.start_figures()
        wait_until(app, lambda: not optimizer.slot.running)
        shoot("optimizer")
        side("Statistics")
        tab.select_name("model_state_dict")
        wait_until(app, lambda: not stats.slot.running and not stats.histogram.slot.running)
        shoot("statistics")
        run = side("Run")
        wait_until(app, lambda: True, timeout=2)
        shoot("run")
        del run
        (llama,) = window.open_paths([make_llama(tmp)])
        wait_until(app, lambda: llama.state != "loading")
        graph = llama.show_graph(True)
        assert graph is not None
        wait_until(app, lambda: graph.view is not None, timeout=600)
        if "g:model" in graph.view.index():
            graph.expand("model.layers.1.self_attn")
            wait_until(app, lambda: "model.layers.1.self_attn" in graph.expanded)
        graph.overlay_box.setCurrentIndex(graph.overlay_box.findText("L2 norm"))
        wait_until(app, lambda: graph.coloured is not None and graph.coloured.view is graph.view)
        weight = next((k for k in graph.hierarchy.readers if k.endswith("layers.1.self_attn.q_proj.weight")),
                      next(iter(graph.hierarchy.readers)))
        llama.select_name(weight)
        wait_until(app, lambda: not graph.layout_slot.running and not graph.overlay_slot.running)
        shoot("graph")
        window.tabs.setCurrentWidget(tab)
        view = open_diff(window, first, second)
        wait_until(app, lambda: not view.busy)
        view.select_row(0)
        wait_until(app, lambda: bool(view.histograms))
        shoot("diff")
        window.close()
        app.processEvents()
        from ckptview.gui.base.workers import wait_for_workers

        wait_for_workers(30_000, quit_first=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
