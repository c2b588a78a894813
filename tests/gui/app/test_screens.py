"""The window fits the screens people use, with the checkpoints they open (issue 35): checked, not looked at.

The checkpoints are what the libraries write (tests/support/screens.py: a sharded Llama, a torchvision-layout
ResNet, Adam + StepLR training, a Lightning Trainer's file, a run of ten checkpoints and a comparison). One
window per screen size and palette visits every checkpoint's side tabs, the run's views and the comparison,
and at each stop fails on:
- a short column of the tree (shape, dtype, size, parameters, device, shard) drawn cut, at 1024 px and up,
  or a name drawn cut anywhere in the expanded tree (issue 45: the columns give way to the names first; a
  name too long to be whole even beside Shape alone has its tooltip), beside the Graph view a cut name
  whose tooltip lacks it;
- a header caption cut (`eff.` for `eff. step`), a label cut or clipped, a plot too small to read;
- the window grown past the size it was given (the comparison's summary made it 1595 px wide);
- a tab that cannot be reached (behind scroll arrows, or hidden and in no menu);
- text under 4.5:1 contrast against what is painted behind it (WCAG), in widgets, cells and plots.
"""

from __future__ import annotations

import pytest

from tests.support import layout_checks as check
from tests.support.screens import build_all, tour

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # ~45 s a window here

SIZES = [(1024, 640), (1280, 800)]
PALETTES = ["light", "dark"]
MIN_PLOT = {640: 60, 800: 100}  # pixels of a plot's data area a person can read, at that window height


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """The checkpoints, built once, and a workspace that holds each open for the whole module: the four
    windows are given it (`palette_window`), so they share one open and one set of figures (statistics,
    spectra) per file."""
    import warnings

    from ckptview.core.session.workspace import Workspace

    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    folder = tmp_path_factory.mktemp("screens")
    with warnings.catch_warnings():  # Trainer.fit's advice (data loader workers, logging): not ours to heed
        warnings.simplefilter("ignore")
        built = build_all(str(folder))
    workspace = Workspace()
    leases = [workspace.acquire(path) for _name, path, _select in built.checkpoints]
    yield built, workspace
    for lease in leases:
        lease.release()


@pytest.fixture
def palette_window(qtbot, settings, request, cases):
    """A window of the given size with the given palette (the application's palette is put back after),
    reading through the module's workspace instead of one of its own."""
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.palette import apply_palette

    (width, height), palette = request.param
    settings.set_palette(palette)
    window = MainWindow(settings)
    window._workspace = cases[1]  # its tabs open through `window.workspace`; none is open yet
    qtbot.addWidget(window)
    window.resize(width, height)
    window.show()
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (width, height))
    yield window
    window.close()
    apply_palette("system")


def problems_at(window, stop, size) -> list[str]:
    from ckptview.gui.checkpoint.tab import CheckpointTab
    from ckptview.gui.checkpoint.tree_model import DEVICE, DTYPE, NAME, PARAMS, SHAPE, SHARD, SIZE
    from ckptview.gui.panels.optimizer import EFF_MEDIAN

    where, page = stop.name, stop.page
    found = []
    if (window.width(), window.height()) != size:
        found.append(f"{where}: the window is {window.width()}x{window.height()}, not {size[0]}x{size[1]}")
    if isinstance(page, CheckpointTab):
        found += check.elided_cells(page.tree, (SHAPE, DTYPE, SIZE, PARAMS, DEVICE, SHARD), f"{where}: tree")
        if where.endswith("/Graph"):  # the tree beside the graph: a narrow strip, names whole in tooltips
            found += check.elided_without_tooltip(page.tree, NAME, f"{where}: tree")
        else:
            found += check.cut_in_any_row(page.tree, NAME, f"{where}: tree", beside=SHAPE)
        optimizer = page.panel("Optimizer")
        if where.endswith("/Optimizer") and EFF_MEDIAN in getattr(optimizer, "columns", ()):
            found += check.column_in_view(optimizer.params_table, optimizer.columns.index(EFF_MEDIAN), where)
    found += check.header_problems(page, where)
    found += check.tab_problems(page, where)
    found += check.label_problems(page, where)
    found += check.plot_problems(page, where, MIN_PLOT[size[1]])
    found += check.contrast_problems(window, where)
    return found


@pytest.mark.parametrize("palette_window", [(s, p) for s in SIZES for p in PALETTES], indirect=True,
                         ids=[f"{s[0]}x{s[1]}-{p}" for s in SIZES for p in PALETTES])
def test_every_screen_fits_and_reads(qtbot, palette_window, cases) -> None:
    window, cases = palette_window, cases[0]
    size = (window.width(), window.height())
    visited, found = [], []

    def wait(condition, timeout=60_000) -> None:
        qtbot.waitUntil(condition, timeout=timeout)

    for stop in tour(window, cases, wait):
        visited.append(stop.name)
        found += problems_at(window, stop, size)
    assert "compare" in visited and any(v.startswith("run/") for v in visited)
    assert sum(v.endswith("/Statistics") for v in visited) == len(cases.checkpoints)
    assert not found, f"{len(found)} problems:\n" + "\n".join(found)
