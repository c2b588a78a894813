"""Before the QApplication: the system libraries Qt's xcb plugin needs, and the command that installs them.

A Linux desktop without one of them (Debian 12 with X but without libxcb-icccm4, libxcb-keysyms1 or
libxcb-cursor0) made Qt abort with "could not load the Qt platform plugin xcb ... Reinstalling the
application may fix this problem", which names neither the library nor the fix. The plugin's needs are read
from its own ELF file (and those of the Qt libraries beside it), each system library is asked of the
dynamic loader as Qt would ask it, and what is missing is named in one line with its apt and dnf packages.
Nothing here imports Qt's platform code: it runs only where the platform would be xcb.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Callable

__all__ = ["loads", "missing_line", "missing_xcb_libraries", "needed_libraries", "xcb_plugin", "would_use_xcb"]

# soname -> (Debian/Ubuntu package, Fedora package); a soname not listed is named as it is.
PACKAGES = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libSM.so.6": ("libsm6", "libSM"),
    "libICE.so.6": ("libice6", "libICE"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
}
_DT_NEEDED = 1
_SHT_DYNAMIC = 6
Finder = Callable[[str], bool]


def loads(soname: str) -> bool:
    """True when the dynamic loader finds and loads `soname` (the search Qt's plugin loader makes)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def would_use_xcb(env: dict[str, str]) -> bool:
    """True when Qt would load its xcb plugin first: QT_QPA_PLATFORM names xcb, or it is unset and the
    session has an X display but no Wayland one (Qt tries its wayland plugin first there)."""
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        return chosen.split(";")[0].split(":")[0] == "xcb"
    if env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE") == "wayland":
        return False
    return bool(env.get("DISPLAY"))


def xcb_plugin() -> str | None:
    """The path of the PySide6 build's xcb platform plugin (None when this build has none)."""
    import PySide6  # the package's folder only: no Qt library is loaded by this

    path = os.path.join(os.path.dirname(PySide6.__file__), "Qt", "plugins", "platforms", "libqxcb.so")
    return path if os.path.isfile(path) else None


def needed_libraries(plugin: str) -> list[str]:
    """Every system library `plugin` needs (its own DT_NEEDED entries and those of the Qt libraries beside
    it, which come with PySide6 and are followed, not listed), in the order found."""
    qt_lib = os.path.normpath(os.path.join(os.path.dirname(plugin), "..", "..", "lib"))
    found: list[str] = []
    seen: set[str] = set()
    todo = [plugin]
    while todo:
        for name in _elf_needed(todo.pop(0)):
            if name in seen:
                continue
            seen.add(name)
            beside = os.path.join(qt_lib, name)
            if os.path.isfile(beside):
                todo.append(beside)
            else:
                found.append(name)
    return found


def missing_xcb_libraries(finder: Finder | None = None) -> list[str]:
    """The system libraries the xcb plugin needs that do not load here (`finder` stands in for the loader)."""
    plugin = xcb_plugin()
    if plugin is None:
        return []
    finder = finder or loads
    try:
        needed = needed_libraries(plugin)
    except (OSError, ValueError, struct.error):  # an unreadable plugin: Qt's own message will do
        return []
    return [name for name in needed if not finder(name)]


def missing_line(missing: list[str]) -> str:
    """One line: what is missing and the commands that install it (Debian/Ubuntu, Fedora)."""
    names = sorted(set(missing))
    deb = sorted({PACKAGES.get(n, (n, n))[0] for n in names})
    rpm = sorted({PACKAGES.get(n, (n, n))[1] for n in names})
    return (f"the window cannot start: Qt's xcb platform plugin needs {', '.join(names)}, not installed. "
            f"Install with `sudo apt install {' '.join(deb)}` (Debian, Ubuntu) or `sudo dnf install "
            f"{' '.join(rpm)}` (Fedora); `ckptview info FILE` and the other commands need none of them.")


def _elf_needed(path: str) -> list[str]:
    """The DT_NEEDED names of an ELF shared object, read from its section headers (no ldd, no loading)."""
    with open(path, "rb") as fh:
        ident = fh.read(16)
        if ident[:4] != b"\x7fELF":
            raise ValueError(f"{path}: not an ELF file")
        wide, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
        header = fh.read(48 if wide else 36)
        if wide:
            shoff, = struct.unpack_from(order + "Q", header, 24)
            shentsize, shnum = struct.unpack_from(order + "HH", header, 42)
        else:
            shoff, = struct.unpack_from(order + "I", header, 16)
            shentsize, shnum = struct.unpack_from(order + "HH", header, 30)
        fh.seek(shoff)
        table = fh.read(shentsize * shnum)
        sections = []
        for i in range(shnum):
            if wide:
                _, kind, _, _, offset, size, link = struct.unpack_from(order + "IIQQQQI", table, i * shentsize)
            else:
                _, kind, _, _, offset, size, link = struct.unpack_from(order + "IIIIIII", table, i * shentsize)
            sections.append((kind, offset, size, link))
        names: list[str] = []
        for kind, offset, size, link in sections:
            if kind != _SHT_DYNAMIC or not 0 <= link < len(sections):
                continue
            fh.seek(offset)
            dynamic = fh.read(size)
            _, str_offset, str_size, _ = sections[link]
            fh.seek(str_offset)
            strings = fh.read(str_size)
            entry = 16 if wide else 8
            for pos in range(0, len(dynamic) - entry + 1, entry):
                tag, value = struct.unpack_from(order + ("qQ" if wide else "iI"), dynamic, pos)
                if tag == 0:
                    break
                if tag == _DT_NEEDED and value < len(strings):
                    names.append(strings[value:strings.index(b"\0", value)].decode("utf-8", "replace"))
        return names
