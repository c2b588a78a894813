"""`ckptview [PATH ...]`: the QApplication, single instance, file-open events, and main() (cli.py parses the
arguments: one argparse for the commands and the window)."""

from __future__ import annotations

import argparse
import atexit
import os
import sys

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Signal
from PySide6.QtGui import QFileOpenEvent, QIcon
from PySide6.QtWidgets import QApplication

from ckptview import desktop
from ckptview.gui.app import platform_libs
from ckptview.gui.app.main_window import MainWindow
from ckptview.gui.app.single_instance import InstanceServer, send_to_running, server_name
from ckptview.gui.base.settings import Settings
from ckptview.gui.base.workers import wait_for_workers
from ckptview.resources import resource_path


class FileOpenFilter(QObject):
    """macOS double-clicks and `open -a` arrive as QFileOpenEvent on the application."""

    paths_received = Signal(list)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.FileOpen and isinstance(event, QFileOpenEvent):
            path = event.file() or event.url().toLocalFile()
            if path:
                self.paths_received.emit([path])
                return True
        return super().eventFilter(watched, event)


def application() -> QApplication:
    """The QApplication, created once."""
    app = QApplication.instance()
    if app is None:
        app = QApplication([sys.argv[0] if sys.argv else "ckptview"])
        app.setApplicationName("ckptview")
        app.setOrganizationName("ckptview")
        app.setDesktopFileName("ckptview")  # Wayland matches the window to ckptview.desktop by this
        app.setWindowIcon(QIcon(resource_path("ckptview.svg")))
        atexit.register(delete_windows)
    return app  # type: ignore[return-value]


def delete_windows() -> None:
    """Delete the windows still open while Python is whole (at exit, before its finalisation).

    A window left to the interpreter's teardown (a script that never ran `app.exec()`, or returned with the
    window in a global) is destroyed while Python is half gone: pyqtgraph's items call their Python
    overrides from their destructors and the process dies of SIGSEGV after its work is done."""
    app = QApplication.instance()
    if app is None:
        return
    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, MainWindow):  # not its menus and popups (top-level, with a parent): they go with it
            widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _absolute(path: str) -> str:
    """A local path made absolute; a URL (https://, hf://, s3://) as given."""
    return path if "://" in path and not path.startswith("file://") else os.path.abspath(path)


def launch(args: argparse.Namespace, settings: Settings | None = None, name: str | None = None,
           ) -> MainWindow | None:
    """Show the window and open the files; None when a running instance took them instead."""
    app = application()
    name = name or args.server_name or server_name()
    paths = [_absolute(p) for p in args.paths]
    wanted = paths + [_absolute(p) for p in (args.diff or [])]
    if not args.new_instance and not args.diff and not args.series and send_to_running(wanted, name):
        return None
    window = MainWindow(settings, remote=args.remote)
    server = InstanceServer(window)
    server.listen(name)
    server.paths_received.connect(lambda received: _hand_over(window, received))
    window.instance_server = server  # type: ignore[attr-defined]
    file_open = FileOpenFilter(window)
    file_open.paths_received.connect(window.open_paths)
    app.installEventFilter(file_open)
    window.file_open_filter = file_open  # type: ignore[attr-defined]
    window.destroyed.connect(lambda *_: server.close())
    window.show()
    if args.diff:
        window.open_diff(*args.diff)
    elif args.series:
        window.open_series(args.series)
    elif paths:
        window.open_paths(paths)
    else:
        window.open_example()
    return window


def _hand_over(window: MainWindow, paths: list[str]) -> None:
    if paths:
        window.open_paths(paths)
    window.raise_window()


def main(args: argparse.Namespace) -> int:
    """Entry point of the window: `args` as cli.py parsed them (`cli.window_args`), with their remote options."""
    if args.install_desktop or args.uninstall_desktop:
        try:
            lines = desktop.install() if args.install_desktop else desktop.uninstall()
        except OSError as exc:
            print(f"ckptview: {exc}", file=sys.stderr)
            return 2
        for line in lines:
            print(line)
        return 0
    reason = startup_problem()
    if reason is not None:  # Qt would abort with a message about the xcb plugin instead
        print(f"ckptview: {reason}", file=sys.stderr)
        return 2
    app = application()
    window = launch(args)
    if window is None:
        return 0
    return finish(int(app.exec()))


def no_display_reason(env: dict[str, str] | None = None, platform: str | None = None) -> str | None:
    """Why the window cannot open here (a Linux/BSD session with no X11 or Wayland display), else None.

    Only when QT_QPA_PLATFORM is unset: a chosen platform (offscreen, vnc, eglfs) needs no display."""
    env = dict(os.environ) if env is None else env
    platform = sys.platform if platform is None else platform
    if env.get("QT_QPA_PLATFORM") or not platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return None
    if env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
        return None
    return ("no display found (neither DISPLAY nor WAYLAND_DISPLAY is set): the window needs a graphical "
            "session. On a terminal, `ckptview info FILE` lists a checkpoint (also diff, export, run, series, graph, "
            "devices); "
            "QT_QPA_PLATFORM=offscreen runs the window without a screen.")


def startup_problem(env: dict[str, str] | None = None, platform: str | None = None,
                    finder: platform_libs.Finder | None = None) -> str | None:
    """Why the window cannot start here, in one line, before Qt tries and aborts: no display, or a system
    library Qt's xcb plugin needs is missing (`finder` stands in for the dynamic loader in tests)."""
    env = dict(os.environ) if env is None else env
    platform = sys.platform if platform is None else platform
    reason = no_display_reason(env, platform)
    if reason is not None or not platform.startswith("linux") or not platform_libs.would_use_xcb(env):
        return reason
    missing = platform_libs.missing_xcb_libraries(finder or platform_libs.loads)
    return platform_libs.missing_line(missing) if missing else None


def finish(status: int, timeout_ms: int = 5000) -> int:
    """Wait for background jobs after the window closed; one stuck in a read must not keep the process alive."""
    if wait_for_workers(timeout_ms, quit_first=True):  # ask every job to stop, then wait
        return status
    # Python would wait for the pool's thread forever at exit (a read blocked on a FIFO or a dead mount).
    print("ckptview: a background read did not finish; exiting without it", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(status)
