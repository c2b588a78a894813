"""ckptview's own palette (issue 35, finding 4): light, dark or the system's, chosen in View > Palette and
kept in settings; every text colour at least 4.5:1 on the surfaces it is drawn on (WCAG), plot lines 3:1,
and the colours of data (NaN, Inf, absent, unchanged) distinct from each other and from the plot on both.

Before, a dark desktop palette gave the run's Findings light text on lavender and the update heat-map
black "unchanged" cells on a black plot; there was no palette of ckptview's own and no setting."""

from __future__ import annotations

import os
import re

import pytest
from PySide6.QtGui import QColor, QPalette

from ckptview.gui.base.palette import Theme, apply_palette, contrast, resolve, theme

THEMES = [Theme.named("light"), Theme.named("dark")]
TEXT = ("window_text", "text", "button_text", "placeholder", "muted", "error", "warning", "good", "link")
SURFACES = ("window", "base", "alternate_base")  # where text of any meaning is drawn
ROW_SURFACES = ("info_banner", "warning_banner", "changed_banner", "flagged_cell") + tuple(
    f"status_{s}" for s in ("identical", "changed", "dtype_mismatch", "shape_mismatch", "only_a", "only_b", "error",
                            "pending")) + tuple(
    f"finding_{s}" for s in ("alarm", "broken", "growth", "stalled", "appeared", "disappeared", "changed", "alpha"))
PLOT_LINES = ("plot_fill", "plot_accent", "plot_mark", "plot_marker", "plot_neutral")
HEAT = ("heat_first", "heat_unchanged", "heat_nan", "heat_inf", "heat_unreadable", "heat_no_ratio", "heat_pending")


def distance(a: QColor, b: QColor) -> float:
    """A rough perceptual distance (redmean-weighted RGB, 0 to ~765)."""
    mean = (a.red() + b.red()) / 2
    dr, dg, db = a.red() - b.red(), a.green() - b.green(), a.blue() - b.blue()
    return ((2 + mean / 256) * dr * dr + 4 * dg * dg + (2 + (255 - mean) / 256) * db * db) ** 0.5


@pytest.mark.parametrize("current", THEMES, ids=lambda t: t.name)
def test_text_keeps_four_and_a_half_to_one_on_every_surface(current):
    low = []
    for surface in SURFACES:
        for text in TEXT:
            ratio = contrast(current.color(text), current.color(surface))
            if ratio < 4.5:
                low.append(f"{text} on {surface}: {ratio:.2f}")
    for surface in ROW_SURFACES:  # rows, banners and chips carry the palette's own text
        ratio = contrast(current.color("text"), current.color(surface))
        if ratio < 4.5:
            low.append(f"text on {surface}: {ratio:.2f}")
    for text, surface in (("highlighted_text", "highlight"), ("tooltip_text", "tooltip_base"),
                          ("plot_foreground", "plot_background")):
        ratio = contrast(current.color(text), current.color(surface))
        if ratio < 4.5:
            low.append(f"{text} on {surface}: {ratio:.2f}")
    for data in ("nan", "posinf", "neginf"):  # the values table writes them as text
        for surface in ("base", "alternate_base", "highlight"):
            wanted = (current.color("highlighted_text") if surface == "highlight" else current.color(data))
            ratio = contrast(wanted, current.color(surface))
            if ratio < 4.5:
                low.append(f"{data} on {surface}: {ratio:.2f}")
    assert not low, low


@pytest.mark.parametrize("current", THEMES, ids=lambda t: t.name)
def test_plot_lines_and_data_stay_distinct_on_the_plot(current):
    background = current.color("plot_background")
    lines = [current.series_color(i) for i in range(len(current.series))] + [current.color(k) for k in PLOT_LINES]
    low = [c.name() for c in lines if contrast(c, background) < 3.0]
    assert not low, f"lines under 3:1 on {background.name()}: {low}"
    assert contrast(current.color("heat_unchanged"), background) >= 3.0  # never black on a black plot
    for surface in ("window", "base"):  # the edge of a check box or a text field (WCAG 1.4.11)
        assert contrast(current.color("control_edge"), current.color(surface)) >= 3.0, surface
    assert current.color("heat_absent") == background  # absent: nothing is drawn there
    heat = [current.color(k) for k in HEAT] + [background]
    close = [(HEAT[i], (HEAT + ("background",))[j]) for i in range(len(HEAT)) for j in range(i + 1, len(heat))
             if distance(heat[i], heat[j]) < 90]
    assert not close, close
    nonfinite = [current.color(k) for k in ("nan", "posinf", "neginf")]
    assert min(distance(a, b) for i, a in enumerate(nonfinite) for b in nonfinite[i + 1:]) > 150


def test_the_two_palettes_are_apart_and_each_is_whole():
    light, dark = THEMES
    assert light.roles.keys() == dark.roles.keys() and light.colors.keys() == dark.colors.keys()
    assert QColor(light.roles["window"]).lightness() > 200 and QColor(dark.roles["window"]).lightness() < 60
    palette = dark.qpalette()
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive):
        assert palette.color(group, QPalette.ColorRole.Base).name() == dark.roles["base"]
        assert palette.color(group, QPalette.ColorRole.PlaceholderText).name() == dark.roles["placeholder"]


def test_applying_a_palette_sets_the_application_and_pyqtgraph(qapp):
    import pyqtgraph as pg

    try:
        assert apply_palette("dark").name == "dark" and theme().dark
        assert qapp.palette().color(QPalette.ColorRole.Window).name() == Theme.named("dark").roles["window"]
        assert qapp.style().baseStyle().name().lower() == "fusion"  # with the edges of the controls
        assert QColor(pg.getConfigOption("background")).name() == Theme.named("dark").colors["plot_background"]
        assert apply_palette("light").name == "light"
        assert qapp.palette().color(QPalette.ColorRole.Base).name() == "#ffffff"
    finally:
        apply_palette("system")


def test_system_follows_the_desktops_scheme(qapp, monkeypatch):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication

    class Hints:
        def __init__(self, scheme):
            self.scheme = scheme

        def colorScheme(self):  # noqa: N802 (Qt's name)
            return self.scheme

    monkeypatch.setattr(QGuiApplication, "styleHints", staticmethod(lambda: Hints(Qt.ColorScheme.Dark)))
    assert resolve("system") == "dark" and resolve("light") == "light"
    monkeypatch.setattr(QGuiApplication, "styleHints", staticmethod(lambda: Hints(Qt.ColorScheme.Light)))
    assert resolve("system") == "light" and resolve("dark") == "dark"


def test_the_view_menu_switches_the_palette_and_settings_keep_it(qtbot, settings):
    from ckptview.gui.app.main_window import MainWindow
    from ckptview.gui.base.settings import Settings

    assert settings.palette() == "system"
    window = MainWindow(settings)
    qtbot.addWidget(window)
    try:
        view = window.menus["View"]
        palette_menu = next(a.menu() for a in view.actions() if a.menu() is not None and "Palette" in a.text())
        texts = [a.text().replace("&", "") for a in palette_menu.actions()]
        assert texts == ["Follow the System", "Light", "Dark"]
        assert window.menus.palette_actions["system"].isChecked()
        window.menus.palette_actions["dark"].trigger()
        assert theme().dark and window.menus.palette_actions["dark"].isChecked()
        dark_window = Theme.named("dark").roles["window"]
        qtbot.waitUntil(lambda: window.palette().color(QPalette.ColorRole.Window).name() == dark_window)
        settings.sync()
        assert Settings(settings._qs.fileName()).palette() == "dark"  # the next run starts dark
        window.menus.palette_actions["light"].trigger()
        assert not theme().dark and settings.palette() == "light"
    finally:
        window.close()
        apply_palette("system")


def test_plots_and_coloured_rows_follow_a_palette_change(qtbot):
    from ckptview.gui.base.plots import plot_widget

    try:
        apply_palette("light")
        plot = plot_widget("value", "count")
        qtbot.addWidget(plot)
        axis = plot.getPlotItem().getAxis("left")
        assert plot.backgroundBrush().color().name() == "#ffffff"
        apply_palette("dark")
        dark = Theme.named("dark")
        assert plot.backgroundBrush().color().name() == dark.colors["plot_background"]
        assert axis.textPen().color().name() == dark.colors["plot_foreground"]
        assert dark.colors["plot_foreground"] in axis.label.toHtml()
    finally:
        apply_palette("system")


def test_colours_are_the_palettes_not_literals_in_the_widgets():
    """Every colour the window draws comes from gui/base/palette.py: a hex literal elsewhere in gui/ is a
    colour that ignores the palette (the Findings list's lavender was one)."""
    import ckptview.gui as gui

    allowed = {("series/plots.py", "#ffffff"), ("series/plots.py", "#000000"),  # the marker's outline: both
               ("series/plots.py", "#21918c")}  # viridis' middle, naming the colour bar in its legend
    root = os.path.dirname(gui.__file__)
    found = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if not name.endswith(".py") or rel == "base/palette.py":
                continue
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    for literal in re.findall(r"['\"]#[0-9a-fA-F]{3}(?:[0-9a-fA-F]{3})?\b", line):
                        if (rel, literal[1:].lower()) not in allowed:
                            found.append(f"{rel}:{number}: {literal[1:]}")
    assert not found, found
