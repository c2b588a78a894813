"""Command line: `ckptview [PATH ...]` opens the window; subcommands share the Qt-free core.

Each subcommand lives in `ckptview.commands.<name>` with `add_parser(subparsers)` and `run(args) -> int`.
The front ends are loaded by name from one table, `FRONT_ENDS` (as a console script names its entry
point): `info` does not pay for `run`'s imports, and no command pays for Qt (nor fails without PySide6).
This is the one place in the package that loads a ckptview module at run time; everywhere else imports
sit at the top of their module (tests/test_architecture.py).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Protocol, cast

from ckptview import __version__, commands
from ckptview.commands.failures import CommandFailure, error_kind, report
from ckptview.commands.wording import cli_words
from ckptview.core.errors import Cancelled, CheckpointError
from ckptview.core.read.bytes.remote.options import DEFAULT_CONCURRENCY, MAX_CONCURRENCY, RemoteOptions
from ckptview.core.read.bytes.remote.urls import parse_size
from ckptview.core.redaction import redact
from ckptview.core.text import printable

SUBCOMMANDS = ("info", "diff", "export", "run", "devices", "series", "graph")
FRONT_ENDS = {**{name: f"ckptview.commands.{name}" for name in SUBCOMMANDS}, "window": "ckptview.gui.app.launch"}
"""Each front end's module: a subcommand's (`add_parser`, `run`) and the window's (`main`)."""


class Subcommand(Protocol):
    """What a module of `ckptview.commands` provides: its argument parser and its run."""

    def add_parser(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _subcommand_modules(only: str | None = None) -> dict[str, Subcommand]:
    """The subcommand modules (just `only` when given: `info` must not pay for `run`'s imports)."""
    modules: dict[str, Subcommand] = {}
    for name in SUBCOMMANDS if only is None else (only,):
        try:
            modules[name] = cast(Subcommand, importlib.import_module(FRONT_ENDS[name]))
        except ModuleNotFoundError as exc:
            if exc.name != FRONT_ENDS[name]:
                raise
    return modules


# The window's usage (gui/app/launch.py parses these), shown by `ckptview --help` beside the subcommands.
WINDOW_USAGE = """the window:
  ckptview [FILE ...]               open checkpoint files or folders in the window (none: an example)
  ckptview --diff A B               compare two checkpoints in the window
  ckptview --series PATH [PATH ...] a training run (a folder of checkpoints, or several) as a timeline
  ckptview --new-instance FILE ...  open a new window instead of handing the files to a running one
  ckptview --install-desktop        register ckptview with the file manager for this user (Linux);
                                    --uninstall-desktop undoes it

`ckptview COMMAND --help` describes a command."""
USAGE = ("ckptview [FILE ...] [--diff A B] [--series PATH ...] [--install-desktop]\n"
         "       ckptview {info,diff,export,run,devices,series,graph} ...")
# Options of the subcommands that the window does not take: a hint instead of the window's usage error.
_COMMAND_OPTIONS = {"--json": "info", "--stats": "info", "--out": "export", "--key": "export",
                    "--format": "export", "--device": "run", "--model": "run", "--input-shape": "run",
                    "--strict": "run", "--watch": "series", "--dot": "graph"}


def remote_parent() -> argparse.ArgumentParser:
    """The options of remote reads, shared by every parser here (the commands' and the window's): main()
    takes them out of argv wherever they are (docs/guide/remote.md) and builds one `RemoteOptions`."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("remote files (any command and the window)")
    group.add_argument("--download", action="store_true",
                       help="a URL whose server ignores range requests may be downloaded whole")
    group.add_argument("--max-download", metavar="SIZE",
                       help="with --download: write at most SIZE (e.g. 2G) when the server announces no size")
    group.add_argument("--deadline", metavar="SECONDS",
                       help="the most one request to a URL may take, connect to last byte (default 120, "
                            "plus 1 s per 128 KiB it carries)")
    group.add_argument("--concurrency", metavar="N",
                       help=f"requests in flight at once when many remote files are read, a folder's shards "
                            f"(default {DEFAULT_CONCURRENCY}, at most {MAX_CONCURRENCY})")
    return parser


class CommandParser(argparse.ArgumentParser):
    """argparse's parser whose errors, under `--json` (`json_errors`), also print the error object on stdout
    (docs/cli.md); stderr gets argparse's usage and error lines as ever."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        """argparse's usage and `PROG: error: MESSAGE` on stderr, the object on stdout under --json; exit 2."""
        self.print_usage(sys.stderr)
        report("usage", f"{self.prog}: {message}", self.json_errors, line=f"{self.prog}: error: {message}")
        self.exit(2)


def build_parser(modules: dict[str, Subcommand], json_errors: bool = False) -> argparse.ArgumentParser:
    """The argument parser over the given subcommand modules (`json_errors`: argv asks for --json)."""
    parser_class = type("CommandParser", (CommandParser,), {"json_errors": json_errors})
    parser = parser_class(prog="ckptview", description="Browse PyTorch checkpoints safely.",
                          usage=USAGE, epilog=WINDOW_USAGE, parents=[remote_parent()],
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ckptview {__version__}")
    # prog: without it argparse makes each subcommand's program name of the usage above (the window's
    # lines too), so `ckptview diff one.pt` printed all of it before `diff: error: ...`.
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(modules) + "}", prog="ckptview")
    for module in modules.values():
        module.add_parser(sub)
    return parser


def window_parser() -> argparse.ArgumentParser:
    """The window's options (`ckptview [FILE ...]`, `--diff A B`, `--series PATH ...`)."""
    parser = argparse.ArgumentParser(prog="ckptview", description="Browse PyTorch checkpoints safely.",
                                     parents=[remote_parent()])
    parser.add_argument("paths", nargs="*", help="checkpoint files or folders to open")
    parser.add_argument("--diff", nargs=2, metavar=("A", "B"), help="compare two checkpoints")
    parser.add_argument("--series", nargs="+", metavar="PATH",
                        help="a training run as a timeline: a folder of checkpoints, or several checkpoints")
    parser.add_argument("--new-instance", action="store_true", help="do not hand the files to a running window")
    parser.add_argument("--install-desktop", action="store_true",
                        help="register ckptview with the file manager for this user (Linux)")
    parser.add_argument("--uninstall-desktop", action="store_true", help="undo --install-desktop")
    parser.add_argument("--version", action="version", version=f"ckptview {__version__}")
    return parser


SERVER_NAME_ENV = "CKPTVIEW_SERVER_NAME"  # the single-instance server's name (tests: never a developer's window)


def window_args(argv: Sequence[str], remote: RemoteOptions | None = None) -> argparse.Namespace:
    """The window's arguments, with the remote options its URLs are read with: `remote` (what main()
    built), else those `argv` gives (`--download`, ...; tests and tools); and the name of the running
    window to hand files to (`server_name`: $CKPTVIEW_SERVER_NAME, else None for the user's own)."""
    if remote is None:
        remote, argv = remote_options(list(argv), {})
    args = window_parser().parse_args(list(argv))
    args.remote = remote
    args.server_name = os.environ.get(SERVER_NAME_ENV) or None
    return args


def entry() -> None:
    """The console script (and `python -m ckptview`): `main`, and for `info` and `diff` an exit that frees nothing.

    A listing of 900,000 tensors builds millions of objects; freeing them one by one costs a quarter of
    a second and helps nobody when the process ends next. So `info` and `diff` keep them (out of the
    collector's view) and this flushes the output and ends the process at once. Every other command
    exits as usual.
    """
    argv = sys.argv[1:]
    listing = bool(argv) and argv[0] in ("info", "diff")
    if listing:
        commands.KEEP_UNTIL_EXIT = True
    code = main()
    if not listing:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a reader that went away (`| head`): what was written is what it wanted
        pass
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ckptview` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        remote, argv = remote_options(argv, os.environ)
    except ValueError as exc:
        report("usage", str(exc), wants_json(argv))
        return 2
    json_out = wants_json(argv)
    if not argv or argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help", "--version"):
        hint = _command_option_hint(argv)
        if hint is not None:
            report("usage", hint, json_out)
            return 2
        return _launch_gui(argv, remote)
    modules = _subcommand_modules(argv[0] if argv[0] in SUBCOMMANDS else None)
    args = build_parser(modules, json_errors=json_out).parse_args(argv)
    args.remote = remote  # what every command's reads of URLs go by
    json_out = bool(getattr(args, "json", False))
    urls = any("://" in a for a in argv)
    try:
        return int(modules[args.command].run(args))
    except BrokenPipeError:
        return 0
    except (Exception, KeyboardInterrupt) as exc:
        if error_kind(exc) == "internal" and os.environ.get("CKPTVIEW_DEBUG"):
            raise
        message, status = _failure_text(exc, urls)
        report(error_kind(exc), message, json_out)
        return status


def wants_json(argv: Sequence[str]) -> bool:
    """Whether `argv` asks for --json (or an abbreviation argparse takes for it), before the parse."""
    for arg in argv:
        if arg == "--":
            return False
        if len(arg) > 3 and "--json".startswith(arg):
            return True
    return False


def _failure_text(exc: BaseException, urls: bool) -> tuple[str, int]:
    """(the one line a failure prints, without `ckptview: `; the exit status) for an error a command raised."""
    if isinstance(exc, CommandFailure):
        return str(exc), exc.status
    if isinstance(exc, CheckpointError):
        return _redact(cli_words(exc), urls), getattr(exc, "exit_status", 2)
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}", 2
    if isinstance(exc, IsADirectoryError):
        return f"is a folder, not a checkpoint: {exc.filename}", 2
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename}", 2
    if isinstance(exc, OSError):  # EIO, ENOSPC, ...: one line naming the file and the error
        code = errno.errorcode.get(exc.errno or 0, "")
        where = f"{exc.filename}: " if exc.filename else ""
        return _redact(f"{where}{exc.strerror or exc}", urls) + (f" ({code})" if code else ""), 2
    if isinstance(exc, (KeyboardInterrupt, Cancelled)):
        return "interrupted", 130
    # a bug of ours: still one line, unless asked for the traceback
    return (f"internal error: {type(exc).__name__}: {_redact(str(exc), urls)} (CKPTVIEW_DEBUG=1 shows the "
            "traceback; please report it)"), 2  # diff(1)'s "trouble" status, like every other error


def _command_option_hint(argv: list[str]) -> str | None:
    """One line for a window launch given a subcommand's option (`ckptview model.pth --json`), else None."""
    for arg in argv:
        option = arg.split("=", 1)[0]
        command = _COMMAND_OPTIONS.get(option)
        if command is not None:
            paths = [a for a in argv if not a.startswith("-")]
            if "--diff" in argv and option == "--json":  # `ckptview --diff A B --json`
                command, paths = "diff", [" ".join(paths[:2]) or "A B"]
            example = f"ckptview {command} {paths[0] if paths else 'PATH'} {arg}"
            return (f"{option} is an option of `ckptview {command}`, not of the window: `{example}` "
                    "(`ckptview --help` lists the commands)")
    return None


def _redact(text: str, urls: bool = False) -> str:
    """Messages naming a URL, or of a command given one, never show a user:password or a query string
    (tokens), wherever a library put them (urllib3 prints bare paths with their query)."""
    if not urls and "://" not in text:
        return text  # a local file's name may hold a '?'
    return redact(text)


def remote_options(argv: list[str], env: Mapping[str, str]) -> tuple[RemoteOptions, list[str]]:
    """The `RemoteOptions` of this invocation, and argv without --download, --max-download SIZE,
    --deadline SECONDS and --concurrency N (anywhere in it, any command and the window). The environment
    gives defaults, read here and nowhere else: CKPTVIEW_DOWNLOAD=1, CKPTVIEW_MAX_DOWNLOAD (bytes),
    CKPTVIEW_DEADLINE and CKPTVIEW_TIMEOUT (seconds), CKPTVIEW_CONCURRENCY (requests)."""
    download = env.get("CKPTVIEW_DOWNLOAD", "") not in ("", "0")
    max_download = _env_number(env, "CKPTVIEW_MAX_DOWNLOAD", int)
    deadline = _env_number(env, "CKPTVIEW_DEADLINE", float)
    timeout = _env_number(env, "CKPTVIEW_TIMEOUT", float)
    concurrency = _env_number(env, "CKPTVIEW_CONCURRENCY", float)
    out: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg == "--":
            out.append(arg)
            out.extend(rest)
            break
        if arg == "--download":
            download = True
            continue
        name, eq, value = arg.partition("=")
        if name not in ("--max-download", "--deadline", "--concurrency"):
            out.append(arg)
            continue
        if not eq:
            value = next(rest, "")
        if name == "--concurrency":
            if not value.isdigit() or not 1 <= int(value) <= MAX_CONCURRENCY:
                raise ValueError(f"--concurrency: not a number of requests from 1 to {MAX_CONCURRENCY}: {value!r}")
            concurrency = int(value)
        elif name == "--max-download":
            try:
                max_download = parse_size(value)
            except ValueError:
                raise ValueError(f"--max-download: not a size: {value!r} (say 500M, 2G or a number of bytes)") from None
        else:
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if not 0 < seconds < float("inf"):
                raise ValueError(f"--deadline: not a number of seconds: {value!r}")
            deadline = seconds
    defaults = RemoteOptions()
    options = RemoteOptions(download=download, max_download=max_download,
                            deadline=max(0.01, deadline) if deadline is not None else defaults.deadline,
                            timeout=max(0.01, timeout) if timeout is not None else defaults.timeout,
                            concurrency=int(concurrency) if concurrency is not None and concurrency >= 1
                            else defaults.concurrency)
    return options, out


def _env_number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> Any:
    """The number in `env[name]` (a malformed one is no setting), or None."""
    text = env.get(name, "")
    if not text:
        return None
    try:
        return parse_size(text) if kind is int else float(text)
    except ValueError:
        return None


def _launch_gui(argv: list[str], remote: RemoteOptions) -> int:
    args = window_args(argv, remote)
    try:
        window = importlib.import_module(FRONT_ENDS["window"])
    except ImportError as exc:  # PySide6 missing: the CLI still works
        print(f"ckptview: the window needs PySide6 and pyqtgraph ({printable(exc)})", file=sys.stderr)
        return 2
    return int(window.main(args))
