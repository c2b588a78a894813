"""What a person sees of a screen, measured: the checks of the layout test (tests/gui/app/test_screens.py).

Each check returns one line per problem, naming the widget ("llama/Statistics: tree: Size '25…iB' of
'256.0 KiB'"), so a failing test says what to look at. What is drawn is computed the way Qt draws it: a
cell's text is elided by the style's text rectangle (`SE_ItemViewItemText` less the focus margins) after
the delegate's own rule, a header caption by `SE_HeaderLabel`; colours are those the palette, the model's
roles or the plot's pens give, against the background that is painted behind them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from PySide6.QtCore import QModelIndex, QPoint, QRect, Qt
from PySide6.QtGui import QBrush, QColor, QPalette
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractScrollArea,
    QAbstractSpinBox,
    QComboBox,
    QHeaderView,
    QLabel,
    QLineEdit,
    QStyle,
    QStyleOptionHeader,
    QStyleOptionViewItem,
    QTabBar,
    QTabWidget,
    QTextEdit,
    QToolButton,
    QWidget,
)

MIN_CONTRAST = 4.5  # WCAG 2.x AA for text
MIN_SWATCH_CONTRAST = 3.0  # WCAG 1.4.11: a legend's coloured square is a graphical object, not text
_COLOR = re.compile(r"(?<![-\w])color\s*[:=]\s*['\"]?(#[0-9a-fA-F]{6}|#[0-9a-fA-F]{3})\b")
_BACKGROUND = re.compile(r"background(?:-color)?\s*:\s*(#[0-9a-fA-F]{6}|#[0-9a-fA-F]{3})\b")
_SWATCH = re.compile(r"<span style=['\"]color:\s*(#[0-9a-fA-F]{3,6})['\"]>\s*(?:&#9632;|■)\s*</span>")


# --- colours ---------------------------------------------------------------------------------------------
def luminance(color: QColor) -> float:
    """WCAG relative luminance of an sRGB colour."""
    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF()) + 0.0722 * channel(color.blueF())


def contrast(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio (1 to 21)."""
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _over(color: QColor, background: QColor) -> QColor:
    """`color` as drawn over `background` (its alpha blended)."""
    alpha = color.alphaF()
    if alpha >= 1.0:
        return QColor(color.red(), color.green(), color.blue())
    return QColor.fromRgbF(*(alpha * getattr(color, c)() + (1 - alpha) * getattr(background, c)()
                             for c in ("redF", "greenF", "blueF")))


def background_of(widget: QWidget) -> QColor:
    """The colour painted behind `widget`: the first of it and its ancestors that fills its background
    (a window, a scroll area's viewport, a widget with autoFillBackground), in its background role."""
    w: QWidget | None = widget
    while w is not None:
        parent = w.parentWidget()
        viewport = isinstance(parent, QAbstractScrollArea) and parent.viewport() is w
        if w.isWindow() or w.autoFillBackground() or viewport:
            return w.palette().color(w.backgroundRole())
        w = parent
    return widget.palette().color(QPalette.ColorRole.Window)


def _colors_in(text: str) -> list[QColor]:
    """The colours a rich text names for its text (legend squares apart)."""
    return [QColor(c) for c in _COLOR.findall(_SWATCH.sub("", text))]


# --- where a widget is ---------------------------------------------------------------------------------
def visible_rect(widget: QWidget, window: QWidget) -> QRect:
    """The part of `widget` a person sees: clipped by every ancestor up to the window."""
    rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    parent = widget.parentWidget()
    while parent is not None and parent is not window:
        rect = rect.intersected(QRect(parent.mapTo(window, QPoint(0, 0)), parent.size()))
        parent = parent.parentWidget()
    return rect.intersected(window.rect())


def shown_widgets(root: QWidget, kind: type) -> Iterator[Any]:
    """The widgets of `kind` under `root` that are visible and not scrolled wholly out of sight."""
    window = root.window()
    for w in root.findChildren(kind):
        if w.isVisibleTo(window) and w.isVisible() and not visible_rect(w, window).isEmpty():
            yield w


def _scrolls(widget: QWidget, horizontal: bool) -> bool:
    """True when an ancestor scroll area can scroll `widget` into view in that direction."""
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            bar = parent.horizontalScrollBar() if horizontal else parent.verticalScrollBar()
            if bar.isVisible() and bar.maximum() > 0:
                return True
        parent = parent.parentWidget()
    return False


def name_of(widget: QWidget) -> str:
    """A name for a widget in a message: its object name, else its class and its text's start."""
    name = widget.objectName() or type(widget).__name__
    text = getattr(widget, "text", None)
    if callable(text) and isinstance(text(), str) and text():
        name += f" {re.sub(r'<[^>]+>', '', text())[:40]!r}"
    return name


# --- item views ----------------------------------------------------------------------------------------
def displayed_text(view: QAbstractItemView, index: QModelIndex) -> tuple[str, str]:
    """(what the cell draws, its whole text): the delegate's rule, then the style's own elision."""
    drawn, whole, _wanted = text_room(view, index)
    return drawn, whole


def text_room(view: QAbstractItemView, index: QModelIndex) -> tuple[str, str, int]:
    """(what the cell draws, its whole text, the pixels its cell would need to draw it whole)."""
    option = QStyleOptionViewItem()
    view.initViewItemOption(option)
    option.rect = view.visualRect(index)
    delegate = view.itemDelegateForIndex(index)
    delegate.initStyleOption(option, index)
    whole = index.data(Qt.ItemDataRole.DisplayRole)
    whole = "" if whole is None else str(whole)
    style = view.style()
    text_rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, view)
    margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1
    room = text_rect.width() - 2 * margin
    drawn = option.fontMetrics.elidedText(option.text, option.textElideMode, room) if option.text else ""
    wanted = option.rect.width() - room + option.fontMetrics.horizontalAdvance(whole)  # its margins and icon too
    return drawn, whole, wanted


def rows_in_view(view: QAbstractItemView, limit: int = 60) -> list[QModelIndex]:
    """The indexes (column 0) of the rows drawn in the viewport, top to bottom."""
    found: list[QModelIndex] = []
    viewport = view.viewport()
    y = 1
    while y < viewport.height() and len(found) < limit:
        index = view.indexAt(QPoint(2, y))
        if not index.isValid():
            index = view.indexAt(QPoint(viewport.width() // 2, y))
        if not index.isValid():
            break
        index = index.siblingAtColumn(0)
        found.append(index)
        y = view.visualRect(index).bottom() + 2
    return found


def elided_cells(view: QAbstractItemView, columns: Iterable[int], where: str) -> list[str]:
    """A line per cell of `columns`, in the rows in view, whose drawn text is not its whole text."""
    problems = []
    header = view.header() if hasattr(view, "header") else view.horizontalHeader()  # type: ignore[attr-defined]
    for row in rows_in_view(view):
        for column in columns:
            if header.isSectionHidden(column):
                continue
            index = row.siblingAtColumn(column)
            drawn, whole = displayed_text(view, index)
            if drawn != whole:
                title = view.model().headerData(column, Qt.Orientation.Horizontal)
                problems.append(f"{where}: {title} drawn {drawn!r} of {whole!r}")
    return problems


def cut_in_any_row(view: Any, column: int, where: str, beside: int | None = None) -> list[str]:
    """A line per cell of `column` that is drawn cut, over every row of the tree as expanded: the view is
    scrolled a page at a time (and put back), so rows below the fold count too. With `beside` (a column
    that stays), a text too long to be whole even with only that column beside it may be cut, but its
    tooltip must hold it."""
    bar = view.verticalScrollBar()
    start = bar.value()
    problems: dict[str, None] = {}
    value = bar.minimum()
    header = view.header()
    while True:
        bar.setValue(value)
        for row in rows_in_view(view):
            index = row.siblingAtColumn(column)
            drawn, whole, wanted = text_room(view, index)
            if drawn == whole:
                continue
            title = view.model().headerData(column, Qt.Orientation.Horizontal)
            most = view.viewport().width() - (header.sectionSize(beside) if beside is not None else 0)
            cell = view.visualRect(index)
            if beside is not None and cell.left() + wanted > most:  # no column could make room for it
                if whole not in str(index.data(Qt.ItemDataRole.ToolTipRole) or ""):
                    problems[f"{where}: {title} {drawn!r} is cut and its tooltip lacks {whole!r}"] = None
                continue
            problems[f"{where}: {title} drawn {drawn!r} of {whole!r}"] = None
        if value >= bar.maximum():
            break
        value = min(bar.maximum(), value + max(1, bar.pageStep()))
    bar.setValue(start)
    return list(problems)


def elided_without_tooltip(view: QAbstractItemView, column: int, where: str) -> list[str]:
    """A line per cell of `column` in view that is cut and whose tooltip does not hold its whole text."""
    problems = []
    for row in rows_in_view(view):
        index = row.siblingAtColumn(column)
        drawn, whole = displayed_text(view, index)
        tip = index.data(Qt.ItemDataRole.ToolTipRole) or ""
        if drawn != whole and whole not in str(tip):
            problems.append(f"{where}: {drawn!r} is cut and its tooltip lacks {whole!r}")
    return problems


def cell_colors(view: QAbstractItemView, index: QModelIndex) -> tuple[QColor, QColor]:
    """(text, background) of a cell as the delegate paints it (selection, the model's roles, alternation)."""
    palette = view.palette()
    selected = view.selectionModel() is not None and view.selectionModel().isSelected(index)
    if selected:
        return palette.color(QPalette.ColorRole.HighlightedText), palette.color(QPalette.ColorRole.Highlight)
    back = index.data(Qt.ItemDataRole.BackgroundRole)
    fore = index.data(Qt.ItemDataRole.ForegroundRole)
    if isinstance(back, QBrush):
        back = back.color()
    if not isinstance(back, QColor) or not back.isValid():
        alternate = getattr(view, "alternatingRowColors", lambda: False)() and index.row() % 2
        back = palette.color(QPalette.ColorRole.AlternateBase if alternate else QPalette.ColorRole.Base)
    if isinstance(fore, QBrush):
        fore = fore.color()
    if not isinstance(fore, QColor) or not fore.isValid():
        fore = palette.color(QPalette.ColorRole.Text)
    return _over(fore, back), back


# --- the checks -------------------------------------------------------------------------------------------
def header_problems(root: QWidget, where: str) -> list[str]:
    """Header captions cut by their section (`eff.` for `eff. step`)."""
    problems = []
    for header in shown_widgets(root, QHeaderView):
        if header.orientation() != Qt.Orientation.Horizontal or header.isHidden():
            continue
        model = header.model()
        if model is None:
            continue
        for logical in range(header.count()):
            if header.isSectionHidden(logical) or header.sectionSize(logical) <= 0:
                continue
            left = header.sectionViewportPosition(logical)
            if left + header.sectionSize(logical) <= 0 or left >= header.viewport().width():
                continue  # scrolled away: a table that scrolls sideways shows it when scrolled to
            caption = str(model.headerData(logical, Qt.Orientation.Horizontal) or "")
            option = QStyleOptionHeader()
            header.initStyleOption(option)
            header.initStyleOptionForIndex(option, logical)
            option.rect = QRect(left, 0, header.sectionSize(logical), header.height())
            room = header.style().subElementRect(QStyle.SubElement.SE_HeaderLabel, option, header).width()
            if caption and option.fontMetrics.horizontalAdvance(caption) > room:
                problems.append(f"{where}: header {caption!r} in {room} px")
    return problems


def tab_problems(root: QWidget, where: str, skip: Iterable[QTabWidget] = ()) -> list[str]:
    """Tabs that cannot be reached: behind scroll arrows, or outside the bar and in no overflow menu."""
    problems = []
    skipped = {id(t.tabBar()) for t in skip}
    for bar in shown_widgets(root, QTabBar):
        if id(bar) in skipped:
            continue
        arrows = [b for b in bar.findChildren(QToolButton) if b.isVisible()]
        if arrows:
            problems.append(f"{where}: tab bar scrolls ({bar.count()} tabs behind arrows)")
            continue
        owner = bar.parentWidget()
        menu_indexes: set[int] = set()
        if isinstance(owner, QTabWidget):
            corner = owner.cornerWidget(Qt.Corner.TopRightCorner)
            if isinstance(corner, QToolButton) and corner.isVisible() and corner.menu() is not None:
                menu_indexes = {a.data() for a in corner.menu().actions() if a.isEnabled()}
        for i in range(bar.count()):
            inside = bar.isTabVisible(i) and bar.rect().contains(bar.tabRect(i))
            if not inside and i not in menu_indexes:
                problems.append(f"{where}: tab {bar.tabText(i)!r} out of reach")
    return problems


def label_problems(root: QWidget, where: str) -> list[str]:
    """Labels whose text is cut: narrower or shorter than their text needs, or clipped by an ancestor
    that cannot scroll them into view. A label that elides itself keeps its whole text in its tooltip."""
    problems = []
    window = root.window()
    for label in shown_widgets(root, QLabel):
        text = label.text()
        if not text or not label.pixmap().isNull():
            continue
        whole = getattr(label, "whole_text", None)
        if callable(whole):  # an eliding label: cut on purpose, whole in the tooltip
            if whole() != text and whole() not in label.toolTip():
                problems.append(f"{where}: {name_of(label)} is cut and its tooltip lacks the text")
            continue
        if label.wordWrap():
            need_w, need_h = label.minimumSizeHint().width(), label.heightForWidth(label.width())
        else:
            need_w, need_h = label.sizeHint().width(), label.sizeHint().height()
        if label.width() < need_w:
            problems.append(f"{where}: {name_of(label)} is {label.width()} px wide, its text needs {need_w}")
        elif label.height() < need_h:
            problems.append(f"{where}: {name_of(label)} is {label.height()} px tall, its text needs {need_h}")
        seen = visible_rect(label, window)
        if seen.width() < label.width() and not _scrolls(label, horizontal=True):
            problems.append(f"{where}: {name_of(label)} is cut at the side ({seen.width()} of {label.width()} px)")
        elif seen.height() < label.height() and not _scrolls(label, horizontal=False):
            problems.append(f"{where}: {name_of(label)} is cut at the edge ({seen.height()} of {label.height()} px)")
    return problems


def _text_pairs(widget: QWidget) -> Iterator[tuple[str, QColor, QColor, float]]:
    """(what, text colour, background, minimum ratio) for the text a widget draws itself."""
    palette = widget.palette()
    role = QPalette.ColorRole
    if isinstance(widget, QLabel):
        back = background_of(widget)
        if widget.text():
            yield "text", palette.color(widget.foregroundRole()), back, MIN_CONTRAST
            for color in _colors_in(widget.text()):
                yield f"text coloured {color.name()}", color, _background_in(widget.text(), back), MIN_CONTRAST
            for swatch in _SWATCH.findall(widget.text()):
                yield f"legend square {swatch}", QColor(swatch), back, MIN_SWATCH_CONTRAST
    elif isinstance(widget, QLineEdit):
        yield "text", palette.color(role.Text), palette.color(role.Base), MIN_CONTRAST
        if widget.placeholderText() and not widget.text():
            yield "placeholder", palette.color(role.PlaceholderText), palette.color(role.Base), MIN_CONTRAST
    elif isinstance(widget, (QComboBox, QAbstractSpinBox)):
        yield "text", palette.color(role.ButtonText if isinstance(widget, QComboBox) and not widget.isEditable()
                                    else role.Text), palette.color(
            role.Button if isinstance(widget, QComboBox) and not widget.isEditable() else role.Base), MIN_CONTRAST
    elif isinstance(widget, QAbstractButton) and widget.text():
        if isinstance(widget, QToolButton) and widget.autoRaise() or not isinstance(widget, QToolButton) and (
                widget.metaObject().className() in ("QCheckBox", "QRadioButton")):
            yield "text", palette.color(role.WindowText), background_of(widget), MIN_CONTRAST
        else:
            yield "text", palette.color(role.ButtonText), palette.color(role.Button), MIN_CONTRAST
    elif isinstance(widget, QTabBar):
        yield "tab text", palette.color(role.WindowText), background_of(widget), MIN_CONTRAST
    elif isinstance(widget, QHeaderView):
        yield "caption", palette.color(role.ButtonText), palette.color(role.Button), MIN_CONTRAST
    elif isinstance(widget, QTextEdit):
        base = palette.color(role.Base)
        yield "text", palette.color(role.Text), base, MIN_CONTRAST
        for color in _colors_in(widget.toHtml() + widget.document().defaultStyleSheet()):
            yield f"text coloured {color.name()}", color, base, MIN_CONTRAST


def _background_in(text: str, default: QColor) -> QColor:
    """The background a rich text gives its coloured spans (the comparison's status chips), else `default`."""
    found = _BACKGROUND.findall(text)
    return QColor(found[0]) if found else default


def contrast_problems(root: QWidget, where: str) -> list[str]:
    """Text under 4.5:1 against what is behind it: widgets, the cells in view, plots' axes and labels."""
    problems = []
    seen: set[tuple[str, str, str]] = set()

    def check(what: str, fore: QColor, back: QColor, least: float) -> None:
        ratio = contrast(fore, back)
        key = (what.split(" ")[0], fore.name(), back.name())
        if ratio < least and key not in seen:
            seen.add(key)
            problems.append(f"{where}: {what} {fore.name()} on {back.name()} is {ratio:.2f}:1")

    for widget in shown_widgets(root, QWidget):
        if not widget.isEnabled():
            continue  # WCAG leaves inactive controls out
        for what, fore, back, least in _text_pairs(widget):
            check(f"{name_of(widget)} {what}", fore, back, least)
        if isinstance(widget, QAbstractItemView) and widget.model() is not None:
            for row in rows_in_view(widget, limit=40):
                for column in _columns(widget, row):
                    index = row.siblingAtColumn(column)
                    if index.data(Qt.ItemDataRole.DisplayRole) in (None, ""):
                        continue
                    fore, back = cell_colors(widget, index)
                    check(f"{widget.objectName() or type(widget).__name__} cell {index.data()!s:.30}", fore, back,
                          MIN_CONTRAST)
    for plot in plots_in(root):
        for what, fore, back, least in plot_text_pairs(plot):
            check(f"plot {what}", fore, back, least)
    return problems


def _columns(view: QAbstractItemView, row: QModelIndex) -> range:
    try:
        return range(view.model().columnCount(row.parent()))
    except TypeError:  # a list widget's model keeps columnCount private: one column
        return range(1)


def plots_in(root: QWidget) -> list[Any]:
    """The pyqtgraph views shown under `root`."""
    import pyqtgraph as pg

    return list(shown_widgets(root, pg.GraphicsView))


def plot_text_pairs(view: Any) -> Iterator[tuple[str, QColor, QColor, float]]:
    """(what, colour, background, minimum) of every text a plot draws: axes' tick labels and titles, text
    items (captions, legends) and a legend's entries."""
    import pyqtgraph as pg
    from PySide6.QtWidgets import QGraphicsTextItem

    back = view.backgroundBrush().color()
    for item in view.scene().items():
        if not item.isVisible():
            continue
        if isinstance(item, pg.AxisItem) and item.style.get("showValues", True):
            yield f"axis {item.orientation} ticks", item.textPen().color(), back, MIN_CONTRAST
        elif isinstance(item, QGraphicsTextItem) and item.toPlainText().strip():
            what = f"text {item.toPlainText()[:30]!r}"
            colors = _colors_in(item.toHtml().replace(f"color:{item.defaultTextColor().name()}", ""))
            if not colors:  # no colour of its own in the text: the item's default colour draws it
                colors = [item.defaultTextColor()]
            for color in colors:
                yield what, color, back, MIN_CONTRAST


def plot_problems(root: QWidget, where: str, least_height: int) -> list[str]:
    """Plots whose data area (a plot's view box) shows less than `least_height` px, or 120 px across."""
    import pyqtgraph as pg

    problems = []
    window = root.window()
    for view in plots_in(root):
        seen = visible_rect(view, window)
        items = [i for i in view.scene().items() if isinstance(i, pg.PlotItem) and i.isVisible()
                 and not isinstance(i, pg.ColorBarItem)]
        for item in items:
            box = item.vb.mapRectToScene(item.vb.boundingRect())
            rect = view.mapFromScene(box).boundingRect()
            rect = QRect(view.mapTo(window, rect.topLeft()), rect.size()).intersected(seen)
            if rect.height() < least_height or rect.width() < 120:
                title = item.titleLabel.text if item.titleLabel is not None and item.titleLabel.text else ""
                problems.append(f"{where}: plot {title or view.objectName() or type(view).__name__} shows "
                                f"{rect.width()}x{rect.height()} px of data")
    return problems


def column_in_view(table: Any, column: int, where: str) -> list[str]:
    """A line when `column` of a table is not wholly inside the table's viewport."""
    header = table.horizontalHeader()
    left = header.sectionViewportPosition(column)
    right = left + header.sectionSize(column)
    if left < 0 or right > table.viewport().width():
        caption = table.model().headerData(column, Qt.Orientation.Horizontal)
        return [f"{where}: column {caption!r} at {left}..{right} px of a {table.viewport().width()} px table"]
    return []
