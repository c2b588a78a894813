"""Tensor names with thousands of dots: nothing recurses once per dot (issue 34, finding 5).

A 1,200-level dotted name ended `info --filter` in "internal error: RecursionError ... please report it", and
the window showed "Could not open ... internal error": grouping by module path recursed once per level. Now
module groups nest at most `grouping.MAX_GROUP_DEPTH` levels (the rest of the name is one row, the tensor
keeps its whole name), with one warning line, and every command and the window open such a file.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from ckptview.cli import main
from ckptview.core.inspect import grouping
from ckptview.core.inspect.grouping import group_tree
from ckptview.core.inspect.query import matching_names, parse_query, visible_rows
from ckptview.core.read.open import open_checkpoint

LEVELS = (1_200, 100_000)


def _deep_name(levels: int) -> str:
    return ".".join(["m"] * levels) + ".weight"


@pytest.fixture(scope="module", params=LEVELS, ids=lambda n: f"{n}-levels")
def deep(request, tmp_path_factory) -> tuple[str, str, str]:
    """(safetensors file, torch file, the deep name), written by the libraries themselves."""
    import torch
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp(f"deep{request.param}")
    name = _deep_name(request.param)
    tensors = {name: torch.arange(4.0).reshape(2, 2), "ok.weight": torch.zeros(3)}
    st = str(folder / "deep.safetensors")
    save_file(tensors, st)
    pt = str(folder / "deep.pt")
    torch.save(tensors, pt)
    return st, pt, name


def _one_line(text: str) -> bool:
    return text.count("\n") <= 1


def test_grouping_is_iterative_and_bounded(deep) -> None:
    st, _pt, name = deep
    limit = getattr(grouping, "MAX_GROUP_DEPTH", 0)
    ckpt = open_checkpoint(st)
    warnings: list[str] = []
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # whatever the interpreter allows: nothing may recurse per dot
    try:
        top = group_tree(ckpt.root, warnings)
        rows = list(top.walk())
        query = parse_query("weight")
        visible, count = visible_rows(top, query, rows)
        names = matching_names(top, query)
    finally:
        sys.setrecursionlimit(before)
    assert count == 2 and names == {name, "ok.weight"}
    depth = max(_depth(r) for r in rows)
    assert depth <= limit + 2  # the groups, the tensor row, the top
    [deep_row] = [r for r in rows if r.name == name]
    assert deep_row.node is not None and deep_row.node.tensor is not None  # the tensor keeps its whole name
    assert id(deep_row) in visible
    assert len(warnings) == 1 and f"{limit}" in warnings[0] and _one_line(warnings[0])
    # Group rows' names grow with their depth, never with the name's: memory stays near the name's size.
    assert sum(len(r.name) for r in rows if r.is_group) < 2 * limit * limit + 10 * len(name)


def _depth(row) -> int:
    depth = 0
    while row.parent is not None:
        row = row.parent
        depth += 1
    return depth


@pytest.mark.parametrize("argv", [["info", "{f}", "--filter", "weight"], ["info", "{f}", "--filter", "m.m.m"],
                                  ["info", "{f}"], ["info", "{f}", "--json", "--filter", "weight"],
                                  ["diff", "{f}", "{f}"], ["diff", "{f}", "{f}", "--json"],
                                  ["series", "{f}", "{o}"], ["series", "{f}", "{o}", "--json"]])
def test_every_command_reads_a_deep_name(deep, argv, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CKPTVIEW_DEBUG", "")
    for path in deep[:2]:
        other = deep[1] if path == deep[0] else deep[0]  # a series needs two checkpoints (issue 45)
        args = [a.replace("{f}", path).replace("{o}", other) for a in argv]
        status = main(args + (["--no-cache", "--workers", "1"] if args[0] == "series" else []))
        got = capsys.readouterr()
        assert "internal error" not in got.err and "Recursion" not in got.err, (args, got.err[:300])
        assert status in (0, 1), (args, got.err[:300])  # diff: 0 identical
        if "--json" in args and args[0] == "info":
            names = [t["name"] for t in json.loads(got.out)["tensors"]]
            assert deep[2] in names and "ok.weight" in names
        elif args[0] == "info":
            assert "weight" in got.out


@pytest.mark.slow
@pytest.mark.gui
def test_the_window_opens_a_deep_name(deep, qtbot, tmp_path) -> None:
    pytest.importorskip("pytestqt")
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.settings import Settings
    from ckptview.gui.base.workers import wait_for_workers

    window = MainWindow(Settings(str(tmp_path / "settings.ini")))
    qtbot.addWidget(window)
    window.show()
    try:
        for path in deep[:2]:
            [tab] = window.open_paths([path])
            qtbot.waitUntil(lambda tab=tab: tab.state != "loading", timeout=120_000)
            assert tab.state == "ready", getattr(tab, "error_text", "")
            assert tab.select_name(deep[2])
            assert [r.name for r in tab.selected_rows()] == [deep[2]]
            tab.filter.set_text("weight")
            tab.apply_filter()
            tab.expand_all()
            qtbot.wait(10)
            assert tab.checkpoint is not None
            np.testing.assert_array_equal(tab.checkpoint.tensor(deep[2]).shape, (2, 2))
            for title in ("Details", "Statistics", "Heat-map", "Spectrum", "Values", "Optimizer", "Training", "Run"):
                tab.show_panel(title)
                qtbot.wait(20)
                _fits_the_screen(window)
        from ckptview.gui.compare.tab import open_diff

        for path in deep[:2]:
            view = open_diff(window, path, path)
            with qtbot.waitSignals([view.finished], raising=False, timeout=120_000) as blocker:
                pass
            assert blocker.signal_triggered and view.model.rowCount() >= 1
            qtbot.wait(50)
            _fits_the_screen(window)
            series = window.open_series([path, path])
            qtbot.waitUntil(lambda series=series: series.state != "loading", timeout=120_000)
            assert series.state == "ready" and series.result is not None and deep[2] in series.result.tensors
            qtbot.wait(50)  # laid out and painted with the name in its legends
            _fits_the_screen(window)
    finally:
        wait_for_workers(30_000)


def _fits_the_screen(window) -> None:
    """No widget of the window wider than the screen: a legend naming the tensor once made a plot 1.5 million
    pixels wide (a label is as wide as its longest word), and each of its paints took seconds."""
    from PySide6.QtWidgets import QWidget

    screen = window.screen().availableGeometry().width()
    wide = [(type(w).__name__, w.objectName(), w.width()) for w in window.findChildren(QWidget) if w.isVisible() and w.width() > screen]
    assert window.width() <= screen and not wide, (window.width(), screen, wide[:5])
