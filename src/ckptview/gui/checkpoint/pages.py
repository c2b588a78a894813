"""The pages a checkpoint tab shows before its tree: opening (with progress), could not open, and the
question before a huge header; and the safety banner above a tree. Widgets only: the tab wires them."""

from __future__ import annotations

import functools
import html
from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from ckptview.core.checkpoint import Checkpoint
from ckptview.core.jobs import Progress
from ckptview.core.text import printable, shown
from ckptview.core.units import human_bytes, plural
from ckptview.gui.base.palette import mute, style_banner
from ckptview.gui.base.wording import window_text

__all__ = ["AskPage", "ErrorPage", "LoadingPage", "PageStack", "safety_banner"]
HEADER_BYTES_PER_TENSOR = 110  # a safetensors header entry, roughly: for "about N tensors" when asking


class PageStack(QStackedWidget):
    """The tab's one page at a time: loading, error, question or the tree."""

    def show_only(self, page: QWidget) -> None:
        """Make `page` the only page (earlier ones are deleted: a reload must not pile pages up)."""
        while self.count():
            old = self.widget(0)
            assert old is not None  # count() > 0
            self.removeWidget(old)
            old.deleteLater()
        self.addWidget(page)
        self.setCurrentWidget(page)


class LoadingPage(QWidget):
    """"Opening NAME…" with a progress bar (busy until the reader reports a fraction) and Cancel."""

    cancel_clicked = Signal()

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        box = QVBoxLayout(self)
        box.addStretch(1)
        self.label = QLabel(f"Opening {html.escape(name)}…")
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        never_wider(self.label)
        bar = self.bar = QProgressBar()
        bar.setRange(0, 0)
        bar.setMaximumWidth(320)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.cancel_clicked)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(bar)
        row.addWidget(cancel)
        row.addStretch(1)
        box.addWidget(self.label)
        box.addLayout(row)
        box.addStretch(2)

    def show_progress(self, step: Progress) -> None:
        """Show how far the open got: a fraction when the reader knows one, else what it is doing."""
        name = html.escape(self.name)
        message = html.escape(printable(step.message))
        if step.total > 0:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(step.fraction * 1000))
            self.label.setText(f"Opening {name}: {message} ({step.fraction:.0%})")
        else:
            self.bar.setRange(0, 0)
            self.label.setText(f"Opening {name}: {message}…")


class ErrorPage(QWidget):
    """"Could not open NAME", the reason (selectable), where the file is, the actions that fix it (`offers`:
    (key, button text, tooltip); `action_clicked(key)`; the buttons in `offer_buttons`), and Reload. An
    offer listed in `menus` (key -> entries) gets a menu instead: `action_clicked("KEY#N")` for entry N."""

    reload_clicked = Signal()
    action_clicked = Signal(str)

    def __init__(self, name: str, path: str, text: str, offers: Sequence[tuple[str, str, str]] = (),
                 menus: dict[str, Sequence[str]] | None = None) -> None:
        super().__init__()
        box = QVBoxLayout(self)
        box.addStretch(1)
        icon = QLabel()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxCritical).pixmap(48, 48))
        icon.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title = QLabel(f"<b>Could not open {html.escape(name)}</b>")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        never_wider(title)
        self.label = QLabel(printable(text))
        self.label.setObjectName("errorLabel")
        self.label.setWordWrap(True)
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        where = QLabel(html.escape(printable(path)))
        mute(where)
        never_wider(where)
        where.setAlignment(Qt.AlignmentFlag.AlignCenter)
        for widget in (icon, title, self.label, where):
            box.addWidget(widget)
        self.offer_buttons: dict[str, QPushButton] = {}
        for i, (key, label, tip) in enumerate(offers):
            button = QPushButton(label)
            button.setObjectName(f"{key}Action")
            button.setToolTip(tip)
            button.setDefault(i == 0)
            entries = (menus or {}).get(key)
            if entries is not None:
                menu = QMenu(button)
                for n, entry in enumerate(entries):
                    menu.addAction(printable(entry), functools.partial(self.action_clicked.emit, f"{key}#{n}"))
                button.setMenu(menu)
            else:
                button.clicked.connect(lambda _checked=False, key=key: self.action_clicked.emit(key))
            self.offer_buttons[key] = button
        retry = QPushButton("Reload")
        retry.setObjectName("reloadButton")
        retry.setToolTip("Open the file again (Ctrl+R)")
        retry.clicked.connect(self.reload_clicked)
        box.addLayout(centered(*self.offer_buttons.values(), retry))
        box.addStretch(2)


class AskPage(QWidget):
    """A header this large takes seconds and gigabytes to read: "Open anyway" or "Close tab"."""

    open_clicked = Signal()
    close_clicked = Signal()

    def __init__(self, name: str, size: int) -> None:
        super().__init__()
        self.size_text = human_bytes(size)
        box = QVBoxLayout(self)
        box.addStretch(1)
        self.label = QLabel(
            f"<b>{html.escape(name)}</b> has a {self.size_text} header: metadata "
            f"for about {plural(max(1, size // HEADER_BYTES_PER_TENSOR), 'tensor')}. Reading it takes a while and "
            "a lot of memory (several times the header size); the window stays usable meanwhile. "
            "Open it anyway?")
        self.label.setObjectName("askLabel")
        self.label.setWordWrap(True)
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        box.addWidget(self.label)
        self.open_button = QPushButton("Open anyway")
        self.open_button.setObjectName("openAnywayButton")
        self.open_button.clicked.connect(self.open_clicked)
        close = QPushButton("Close tab")
        close.clicked.connect(self.close_clicked)
        box.addLayout(centered(self.open_button, close))
        box.addStretch(2)


def never_wider(label: QLabel) -> None:
    """A label naming the file wraps, and a name without spaces is cut rather than widening the window
    (a 170-character name made the window 1,200 px wide); the whole text is in its tooltip."""
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.setMinimumWidth(1)
    label.setToolTip(label.text() if "<" not in label.text() else "")


def centered(*widgets: QWidget) -> QHBoxLayout:
    """A row with `widgets` in its middle."""
    row = QHBoxLayout()
    row.addStretch(1)
    for widget in widgets:
        row.addWidget(widget)
    row.addStretch(1)
    return row


OPEN_LINK, SERIES_LINK = "open:", "series:"
BANNER_GLOBALS = 4  # unsafe globals named in the banner's text (all of them, up to MAX_TIP_GLOBALS, in its tooltip)
MAX_TIP_GLOBALS = 60
UNSAFE_WARNING = "file references globals outside the safe set (nothing was run): "  # the readers' per-file line  # the banner's links: open one other checkpoint, the folder as a run


def safety_banner(checkpoint: Checkpoint) -> QFrame | None:
    """The banner naming globals outside the safe set and the reader's warnings (None when there are none).

    A folder holding checkpoints besides the one opened links to them (`OPEN_LINK` + index into
    ``metadata["_other_checkpoints"]``, `SERIES_LINK`); the label's `linkActivated` says which."""
    unsafe, warnings = checkpoint.unsafe_globals, checkpoint.warnings
    if not unsafe and not warnings:
        return None
    frame = QFrame()
    frame.setObjectName("safetyBanner")
    style_banner(frame, "warning_banner" if unsafe else "info_banner", "warning_border" if unsafe else "info_border")
    row = QHBoxLayout(frame)
    row.setContentsMargins(8, 6, 8, 6)
    icon = QLabel()
    pixmap = QStyle.StandardPixmap.SP_MessageBoxWarning if unsafe else QStyle.StandardPixmap.SP_MessageBoxInformation
    icon.setPixmap(frame.style().standardIcon(pixmap).pixmap(24, 24))
    row.addWidget(icon, 0, Qt.AlignmentFlag.AlignTop)
    parts = []
    tip = ""
    if unsafe:
        # A few names in the text (an HF Trainer folder names a dozen: ten lines of a 640 px screen), every
        # one in the tooltip.
        names = ", ".join(f"<code>{html.escape(shown(g))}</code>" for g in unsafe[:BANNER_GLOBALS])
        more = f" and {len(unsafe) - BANNER_GLOBALS} more" if len(unsafe) > BANNER_GLOBALS else ""
        parts.append(f"<b>This file references code outside the safe set:</b> {names}{more}. ckptview did not "
                     "import or run any of it; <code>torch.load(weights_only=False)</code> would.")
        tip = "Referenced, never imported or run:\n" + "\n".join(shown(g) for g in unsafe[:MAX_TIP_GLOBALS])
    # The readers also say so, file by file (`X: file references globals outside the safe set ...`): the
    # sentence above names them all already.
    warnings = [w for w in warnings if not (unsafe and (all(g in w for g in unsafe) or UNSAFE_WARNING in w))]
    others = list(checkpoint.metadata.get("_other_checkpoints") or ())
    for warning in warnings[:5]:
        line = html.escape(shown(window_text(warning)))  # no command line: the links below do it
        if others and warning.startswith("the folder also holds"):
            links = [f"<a href='{OPEN_LINK}{i}'>Open {html.escape(shown(name))}</a>" for i, name in enumerate(others[:3])]
            if len(others) > 1:
                links.insert(0, f"<a href='{SERIES_LINK}'>Open the folder as a run</a>")
            line += " " + " · ".join(links)
        parts.append(line)
    if len(warnings) > 5:
        parts.append(f"… and {len(warnings) - 5} more warnings")
    text = QLabel("<br>".join(parts))
    text.setTextFormat(Qt.TextFormat.RichText)  # always: the parts are escaped here, never guessed at by Qt
    text.setObjectName("bannerText")
    text.setToolTip(tip)
    text.setWordWrap(True)
    text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                 | Qt.TextInteractionFlag.LinksAccessibleByMouse)
    row.addWidget(text, 1)
    return frame
