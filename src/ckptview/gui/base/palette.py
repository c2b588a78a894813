"""The window's own colours: a light and a dark palette (or the one matching the system), for every widget
and plot, and the colours of data that must stay distinct on both.

On a dark desktop the window took the system's palette for its text while keeping its own light
backgrounds (the run's Findings were light text on lavender), and "unchanged" heat-map cells were black on a
black plot. Here one `Theme` names every colour the window draws: the Qt palette's roles, the colours of
text that means something (an error, a warning), of surfaces (a banner, a comparison's status), of data
(NaN, Inf, absent, unchanged) and of plots (background, axes, series). Text colours keep at least 4.5:1
against the surfaces they are drawn on (WCAG 2 relative luminance; tests/gui/base/test_palette.py checks
every pair), plot lines and legend squares 3:1 against the plot.

`apply_palette("light" | "dark" | "system")` sets the application's palette (and Qt's Fusion style, which
draws with it on every platform) and pyqtgraph's defaults, then tells everything registered with
`on_palette_change`; `theme()` is the theme in use, `color(key)` one of its colours.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleFactory, QStyleOption, QWidget

__all__ = ["CHOICES", "Theme", "apply_palette", "color", "contrast", "mute", "on_palette_change", "palette_events",
           "resolve", "style_banner", "theme", "tinted"]

CHOICES = ("system", "light", "dark")  # what the View menu offers and settings keep

# Qt palette roles: (light, dark).
_ROLES = {
    "window": ("#f2f2f2", "#2a2a2a"),
    "window_text": ("#1b1b1b", "#e8e8e8"),
    "base": ("#ffffff", "#1e1e1e"),
    "alternate_base": ("#f4f6f8", "#262829"),
    "text": ("#1b1b1b", "#e8e8e8"),
    "button": ("#e6e6e6", "#383838"),
    "button_text": ("#1b1b1b", "#e8e8e8"),
    "highlight": ("#1c5ea8", "#2f6cb3"),
    "highlighted_text": ("#ffffff", "#ffffff"),
    "placeholder": ("#666666", "#9e9e9e"),
    "link": ("#0b55ad", "#8cbcff"),
    "link_visited": ("#6a3ca8", "#c5a3ff"),
    "tooltip_base": ("#fffbe0", "#3a3a3a"),
    "tooltip_text": ("#1b1b1b", "#e8e8e8"),
    "disabled_text": ("#8c8c8c", "#7a7a7a"),
    "bright_text": ("#ffffff", "#ffffff"),
}
# The window's other colours: (light, dark).
_COLORS = {
    # Text that means something, on the window, a panel or a table.
    "muted": ("#5a5a5a", "#ababab"),  # captions beside values, a container's item count
    "error": ("#b00020", "#ff7b7b"),
    "warning": ("#8a5200", "#f0b45c"),
    "good": ("#1c7330", "#74d68f"),
    # Surfaces with text on them (text: the palette's text colour).
    "info_banner": ("#e6eefa", "#1f2d42"),
    "info_border": ("#8eaad6", "#4a6a99"),
    "warning_banner": ("#fff3c9", "#3d3311"),
    "warning_border": ("#d1a800", "#9c7d10"),
    "changed_banner": ("#fde6e1", "#46231d"),
    "changed_border": ("#d07a66", "#a3523f"),
    "flagged_cell": ("#ffd6d6", "#5a2727"),  # a spectrum figure outside its usual range
    # A comparison's status and a run's findings: row backgrounds, the palette's text on top.
    "status_identical": ("#d9f2d9", "#1d3b24"),
    "status_changed": ("#ffe0b3", "#4a3313"),
    "status_dtype_mismatch": ("#fff3b0", "#464013"),
    "status_shape_mismatch": ("#e8d5ff", "#3a2a55"),
    "status_only_a": ("#ffd1d1", "#4f2020"),
    "status_only_b": ("#cfe2ff", "#1f3050"),
    "status_error": ("#ffa8a8", "#6b1f1f"),
    "status_pending": ("#ececec", "#333333"),
    "finding_alarm": ("#ffd1d1", "#4f2020"),  # NaN, Inf
    "finding_broken": ("#ffa8a8", "#6b1f1f"),  # unreadable, unsafe
    "finding_growth": ("#ffe0b3", "#4a3313"),  # explosion
    "finding_stalled": ("#e2e2ff", "#2c2c55"),
    "finding_appeared": ("#d9f2d9", "#1d3b24"),
    "finding_disappeared": ("#ececec", "#333333"),
    "finding_changed": ("#fff3b0", "#464013"),  # shape or dtype
    "finding_alpha": ("#dcecff", "#1f3350"),
    # Data: non-finite values, as text on the base colour and as heat-map cells.
    "nan": ("#b000b0", "#ff66ff"),
    "posinf": ("#8a6a00", "#ffd447"),
    "neginf": ("#00783a", "#3ddc84"),
    # The run's update heat-map: states that are not a ratio (viridis holds the ratios).
    "heat_absent": ("#ffffff", "#1e1e1e"),  # the plot's own background: nothing is there
    "heat_first": ("#b5b5b5", "#8c8c8c"),
    "heat_unchanged": ("#000000", "#f5f5f5"),
    "heat_nan": ("#e6194b", "#ff4d6d"),
    "heat_inf": ("#f58231", "#ff9a4d"),
    "heat_unreadable": ("#9a6324", "#b07a3c"),
    "heat_no_ratio": ("#f5a3e6", "#c46fb5"),
    "heat_pending": ("#cfe2f3", "#3d3d52"),
    # Plots.
    "plot_background": ("#ffffff", "#1e1e1e"),
    "plot_foreground": ("#1b1b1b", "#e0e0e0"),
    "plot_fill": ("#d94c4c", "#ff7a7a"),  # a histogram's bars
    "plot_accent": ("#c25400", "#ff9a3d"),  # points of a comparison, a spectrum's fit
    "plot_mark": ("#c4161c", "#ff5c5c"),  # a finding's line, NaN/Inf crosses
    "plot_marker": ("#1d5fb0", "#6fa8ff"),  # the selected row's line
    "plot_neutral": ("#555555", "#b0b0b0"),  # a difference histogram
    "bar": ("#3a74b0", "#5b9bd8"),  # the summary's size bars
    # The edge of a check box, a radio button, a text field: 3:1 on the window (WCAG 1.4.11); Fusion's own
    # is the window's colour darkened (2:1 on light, 1.2:1 on dark: the boxes vanished).
    "control_edge": ("#767676", "#8c8c8c"),
}
# Lines of several series (over white: each at least 3:1; over the dark base likewise).
_SERIES = {
    "light": ("#1f62a8", "#c4161c", "#1a7f37", "#7b3fb3", "#b35900", "#8c564b", "#c2185b", "#4d4d4d"),
    "dark": ("#5aa2ff", "#ff6b6b", "#4cd97b", "#c79bff", "#ffa54d", "#d9a27e", "#ff7ac0", "#c8c8c8"),
}


def contrast(a: QColor, b: QColor) -> float:
    """WCAG 2 contrast ratio of two colours (1 to 21)."""
    def luminance(c: QColor) -> float:
        def channel(v: float) -> float:
            return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

        return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF())

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@dataclass(frozen=True)
class Theme:
    """Every colour the window draws, for one of the two palettes."""

    name: str  # "light" or "dark"
    roles: dict[str, str] = field(default_factory=dict)
    colors: dict[str, str] = field(default_factory=dict)
    series: tuple[str, ...] = ()

    @classmethod
    def named(cls, name: str) -> Theme:
        """The light or the dark theme."""
        side = 0 if name == "light" else 1
        return cls(name, {k: v[side] for k, v in _ROLES.items()}, {k: v[side] for k, v in _COLORS.items()},
                   _SERIES[name])

    @property
    def dark(self) -> bool:
        """True for the dark theme."""
        return self.name == "dark"

    def color(self, key: str) -> QColor:
        """A colour by its key (a palette role's or one of the window's own)."""
        return QColor(self.colors.get(key) or self.roles[key])

    def hex(self, key: str) -> str:
        """A colour's #rrggbb (for rich text and style sheets)."""
        return self.colors.get(key) or self.roles[key]

    def series_color(self, index: int) -> QColor:
        """The colour of the `index`-th line of a plot (the same in its legend)."""
        return QColor(self.series[index % len(self.series)])

    def qpalette(self) -> QPalette:
        """The Qt palette of this theme (every colour group the same, disabled text apart)."""
        r = {k: QColor(v) for k, v in self.roles.items()}
        button = r["button"]
        role = QPalette.ColorRole
        palette = QPalette()
        pairs = {role.Window: r["window"], role.WindowText: r["window_text"], role.Base: r["base"],
                 role.AlternateBase: r["alternate_base"], role.Text: r["text"], role.Button: button,
                 role.ButtonText: r["button_text"], role.Highlight: r["highlight"],
                 role.HighlightedText: r["highlighted_text"], role.PlaceholderText: r["placeholder"],
                 role.Link: r["link"], role.LinkVisited: r["link_visited"], role.ToolTipBase: r["tooltip_base"],
                 role.ToolTipText: r["tooltip_text"], role.BrightText: r["bright_text"],
                 role.Light: button.lighter(150), role.Midlight: button.lighter(115),
                 role.Mid: button.darker(130), role.Dark: button.darker(160), role.Shadow: QColor("#000000"),
                 role.Accent: r["highlight"]}
        for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive, QPalette.ColorGroup.Disabled):
            for key, value in pairs.items():
                palette.setColor(group, key, value)
        for key in (role.WindowText, role.Text, role.ButtonText, role.PlaceholderText):
            palette.setColor(QPalette.ColorGroup.Disabled, key, r["disabled_text"])
        palette.setColor(QPalette.ColorGroup.Disabled, role.Highlight, button.darker(120))
        return palette


class _Style(QProxyStyle):
    """Fusion, with the edges of check boxes, radio buttons and text fields in the theme's `control_edge`."""

    _EDGED = (QStyle.PrimitiveElement.PE_IndicatorCheckBox, QStyle.PrimitiveElement.PE_IndicatorRadioButton,
              QStyle.PrimitiveElement.PE_FrameLineEdit)

    def drawPrimitive(self, element: QStyle.PrimitiveElement, option: QStyleOption,  # noqa: N802 (Qt's name)
                      painter: QPainter, widget: QWidget | None = None) -> None:
        super().drawPrimitive(element, option, painter, widget)
        if element not in self._EDGED or not option.state & QStyle.StateFlag.State_Enabled:
            return
        painter.save()
        try:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            painter.setPen(_current.color("control_edge"))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            rect = QRectF(option.rect).adjusted(0.5, 0.5, -0.5, -0.5)
            if element == QStyle.PrimitiveElement.PE_IndicatorRadioButton:
                painter.drawEllipse(rect.adjusted(1, 1, -1, -1))
            else:
                painter.drawRoundedRect(rect, 2, 2)
        finally:
            painter.restore()


class PaletteEvents(QObject):
    """`changed(theme)` after `apply_palette` (plots and colours set in code follow it)."""

    changed = Signal(object)


_events: PaletteEvents | None = None
_current = Theme.named("light")
_system_palette: QPalette | None = None


def palette_events() -> PaletteEvents:
    """The process-wide PaletteEvents (made on first use, on the GUI thread)."""
    global _events
    if _events is None:
        _events = PaletteEvents()
    return _events


def theme() -> Theme:
    """The theme in use (light until a palette is applied)."""
    return _current


def color(key: str) -> QColor:
    """A colour of the theme in use."""
    return _current.color(key)


def resolve(choice: str) -> str:
    """"light" or "dark" for a choice: "system" follows the desktop's colour scheme (Qt's style hints, or
    failing them the lightness of the palette the desktop gave the application)."""
    if choice in ("light", "dark"):
        return choice
    app = QGuiApplication.instance()
    if app is None:
        return "light"
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return "dark"
    if scheme == Qt.ColorScheme.Light:
        return "light"
    palette = _system_palette if _system_palette is not None else QGuiApplication.palette()
    return "dark" if palette.color(QPalette.ColorRole.Window).lightness() < 128 else "light"


def apply_palette(choice: str) -> Theme:
    """Use the light or dark palette ("system": the one matching the desktop) for the whole application:
    Qt's palette (Fusion style, which honours it on every platform), pyqtgraph's defaults, and everything
    registered with `on_palette_change`."""
    global _current, _system_palette

    app = QApplication.instance()
    if _system_palette is None and app is not None:
        _system_palette = QGuiApplication.palette()  # the desktop's, before ours replaces it
    chosen = Theme.named(resolve(choice if choice in CHOICES else "system"))
    changed = chosen != _current
    _current = chosen
    if isinstance(app, QApplication):
        if not isinstance(app.style(), _Style):
            app.setStyle(_Style(QStyleFactory.create("Fusion")))
        app.setPalette(chosen.qpalette())
    _set_pyqtgraph_defaults(chosen)
    if changed:
        palette_events().changed.emit(chosen)
    return chosen


def _set_pyqtgraph_defaults(chosen: Theme) -> None:
    import sys

    pg = sys.modules.get("pyqtgraph")  # set when pyqtgraph is loaded; plots made later ask style_plot
    if pg is not None:
        pg.setConfigOptions(background=chosen.hex("plot_background"), foreground=chosen.hex("plot_foreground"))


def mute(widget: QWidget) -> None:
    """Draw `widget`'s text in the palette's muted colour (captions beside values); it follows palette
    changes by itself, being a palette role."""
    widget.setForegroundRole(QPalette.ColorRole.PlaceholderText)


def tinted(icon: QIcon, tint: QColor, size: int = 16) -> QIcon:
    """A one-colour icon (an arrow) redrawn in `tint`: the style's black glyphs vanish on a dark palette."""
    pixmap = icon.pixmap(size, size)
    painted = QPixmap(pixmap.size())
    painted.setDevicePixelRatio(pixmap.devicePixelRatio())
    painted.fill(Qt.GlobalColor.transparent)
    painter = QPainter(painted)
    try:
        painter.drawPixmap(0, 0, pixmap)
        painter.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceIn)
        painter.fillRect(painted.rect(), tint)
    finally:
        painter.end()
    return QIcon(painted)


def style_banner(frame: QWidget, background: str, border: str) -> None:
    """Give a banner (a QFrame with an object name) the theme's `background` and `border` colours and the
    theme's text on it, now and after every palette change."""
    name = frame.objectName()

    def apply(current: Theme) -> None:
        frame.setStyleSheet(f"#{name} {{ background: {current.hex(background)}; border: 1px solid "
                            f"{current.hex(border)}; border-radius: 4px; }} #{name} QLabel {{ color: "
                            f"{current.hex('text')}; }}")

    on_palette_change(frame, apply)


def on_palette_change(owner: QObject, apply: Callable[[Theme], Any]) -> None:
    """Call `apply(theme)` now and after every palette change while `owner` lives (colours set in code:
    a plot's pens, a style sheet, rich text)."""
    apply(_current)
    ref = weakref.ref(owner)

    def follow(chosen: Theme) -> None:
        if ref() is not None:
            with contextlib.suppress(RuntimeError):  # the C++ object went before the Python one
                apply(chosen)

    events = palette_events()
    events.changed.connect(follow)
    owner.destroyed.connect(lambda *_: _disconnect(events, follow))


def _disconnect(events: PaletteEvents, slot: Callable[[Theme], None]) -> None:
    with contextlib.suppress(RuntimeError, TypeError):
        events.changed.disconnect(slot)
