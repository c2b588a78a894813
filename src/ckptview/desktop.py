"""`ckptview --install-desktop` / `--uninstall-desktop`: file-manager integration for the current user (Qt-free).

Writes under ``$XDG_DATA_HOME`` (default ``~/.local/share``): ``applications/ckptview.desktop``,
``mime/packages/ckptview.xml`` and ``icons/hicolor/scalable/apps/ckptview.svg``, then refreshes the MIME and
desktop databases when those tools exist. A manifest records every file and folder it created so that
uninstalling removes exactly those (and the caches the refresh tools generated in folders it created).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

from ckptview.resources import resource_path

MIME_TYPES = ("application/x-pytorch-checkpoint", "application/x-safetensors", "application/x-gguf")
MANIFEST = os.path.join("ckptview", "desktop-install.json")



DESKTOP_ID = "ckptview.desktop"
DEFAULTS, ADDED = "Default Applications", "Added Associations"


def data_home() -> str:
    """`$XDG_DATA_HOME`, or `~/.local/share`."""
    return os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")


def config_home() -> str:
    """`$XDG_CONFIG_HOME`, or `~/.config` (where `mimeapps.list` lives)."""
    return os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")


def exec_command() -> str:
    """What the .desktop entry runs: the `ckptview` script next to this Python, else on PATH."""
    candidates = [os.path.join(os.path.dirname(sys.executable), "ckptview"), shutil.which("ckptview")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return _quote(path)
    return f"{_quote(sys.executable)} -m ckptview"


def _quote(arg: str) -> str:
    # Desktop Entry Spec: quote arguments with reserved characters; escape " ` $ \ inside quotes.
    if not any(ch in arg for ch in ' \t\n"\'\\><~|&;$*?#()`'):
        return arg
    return '"' + "".join("\\" + ch if ch in '"`$\\' else ch for ch in arg) + '"'


def _resource_text(name: str) -> str:
    with open(resource_path(name), encoding="utf-8") as fh:
        return fh.read()


def desktop_entry() -> str:
    """The text of ckptview.desktop (resources/ckptview.desktop with this installation's command)."""
    return _resource_text("ckptview.desktop").replace("@EXEC@", exec_command())


def mime_xml() -> str:
    """The shared-mime-info definition (resources/ckptview.xml): globs, and torch's magic for *.bin."""
    return _resource_text("ckptview.xml")


def _targets(base: str) -> dict[str, str]:
    return {
        os.path.join(base, "applications", "ckptview.desktop"): desktop_entry(),
        os.path.join(base, "mime", "packages", "ckptview.xml"): mime_xml(),
        os.path.join(base, "icons", "hicolor", "scalable", "apps", "ckptview.svg"): _resource_text("ckptview.svg"),
    }


def install(base: str | None = None, refresh: bool = True) -> list[str]:
    """Install the desktop entry, MIME types and icon; returns lines describing what was done."""
    base = base or data_home()
    manifest_path = os.path.join(base, MANIFEST)
    previous = _read_manifest(manifest_path)
    files, created_dirs = list(previous.get("files", [])), list(previous.get("created_dirs", []))
    for path, text in _targets(base).items():
        for folder in _missing_dirs(os.path.dirname(path)):
            os.makedirs(folder, exist_ok=True)
            created_dirs.append(folder)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        if path not in files:
            files.append(path)
    for folder in _missing_dirs(os.path.dirname(manifest_path)):
        os.makedirs(folder, exist_ok=True)
        created_dirs.append(folder)
    associations = previous.get("mimeapps") or associate(os.path.join(config_home(), "mimeapps.list"))
    with open(manifest_path, "w", encoding="utf-8") as fh:
        json.dump({"files": files, "created_dirs": created_dirs, "mimeapps": associations}, fh, indent=1)
    lines = [f"installed {p}" for p in files]
    if associations.get("defaults"):
        lines.append(f"set ckptview as the default for {', '.join(associations['defaults'])} in "
                     f"{associations['path']}")
    kept = [t for t in MIME_TYPES if t not in associations.get("defaults", [])]
    if kept:
        lines.append(f"kept your own default application for {', '.join(kept)} (ckptview is offered in 'Open With')")
    if refresh:
        lines += _refresh(base)
    return lines


def uninstall(base: str | None = None, refresh: bool = True) -> list[str]:
    """Remove exactly what `install` added (files, then the folders it created)."""
    base = base or data_home()
    manifest_path = os.path.join(base, MANIFEST)
    manifest = _read_manifest(manifest_path)
    if not manifest:
        return [f"nothing to remove: no ckptview desktop installation under {base}"]
    lines = []
    for path in manifest.get("files", []):
        if os.path.exists(path):
            os.remove(path)
            lines.append(f"removed {path}")
    if manifest.get("mimeapps"):
        lines += dissociate(manifest["mimeapps"])
    os.remove(manifest_path)
    if refresh:
        lines += _refresh(base)
    # Deepest first; a created folder may now hold only caches the refresh tools regenerated.
    for folder in sorted(manifest.get("created_dirs", []), key=len, reverse=True):
        if os.path.isdir(folder):
            if folder in (os.path.join(base, "mime"), os.path.join(base, "applications")) and \
                    not _holds_user_files(folder):
                shutil.rmtree(folder)
            elif not os.listdir(folder):
                os.rmdir(folder)
    return lines


# ---------------------------------------------------------------------------------------------------
# mimeapps.list: the association itself, read by GIO/KDE apps even where update-desktop-database is missing.


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().splitlines()
    except FileNotFoundError:
        return []


def _section_span(lines: list[str], section: str) -> tuple[int, int] | None:
    """(index of the header line, index after the section's last line), or None."""
    start = next((i for i, line in enumerate(lines) if line.strip() == f"[{section}]"), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("[")), len(lines))
    return start, end


def _get(lines: list[str], section: str, key: str) -> tuple[int, str] | None:
    span = _section_span(lines, section)
    if span is None:
        return None
    for i in range(span[0] + 1, span[1]):
        k, sep, value = lines[i].partition("=")
        if sep and k.strip() == key:
            return i, value.strip()
    return None


def _put(lines: list[str], section: str, key: str, value: str) -> None:
    found = _get(lines, section, key)
    if found is not None:
        lines[found[0]] = f"{key}={value}"
        return
    span = _section_span(lines, section)
    if span is None:
        if lines and lines[-1].strip():
            lines.append("")
        lines += [f"[{section}]", f"{key}={value}"]
    else:
        end = span[1]
        while end > span[0] + 1 and not lines[end - 1].strip():
            end -= 1  # keep the blank line before the next section
        lines.insert(end, f"{key}={value}")


def _write_lines(path: str, lines: list[str]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.ckptview-tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def associate(path: str) -> dict[str, Any]:
    """Offer ckptview for its MIME types in `path` (mimeapps.list) and make it the default where the user
    has none; returns what was changed, so that `dissociate` undoes exactly that."""
    existed = os.path.exists(path)
    created_dirs = _missing_dirs(os.path.dirname(path))
    lines = _read_lines(path)
    defaults, added = [], []
    for mime in MIME_TYPES:
        if _get(lines, DEFAULTS, mime) is None:
            _put(lines, DEFAULTS, mime, f"{DESKTOP_ID};")
            defaults.append(mime)
        current = _get(lines, ADDED, mime)
        apps = [a for a in (current[1] if current else "").split(";") if a]
        if DESKTOP_ID not in apps:
            _put(lines, ADDED, mime, ";".join([*apps, DESKTOP_ID]) + ";")
            added.append(mime)
    _write_lines(path, lines)
    return {"path": path, "defaults": defaults, "added": added, "created": not existed,
            "created_dirs": created_dirs}


def dissociate(record: dict[str, Any]) -> list[str]:
    """Undo `associate`: drop the defaults and offers it added that still name ckptview."""
    path = str(record.get("path", ""))
    lines = _read_lines(path)
    if not lines:
        return []
    for mime in record.get("defaults", []):
        found = _get(lines, DEFAULTS, mime)
        if found is not None and found[1] in (DESKTOP_ID, f"{DESKTOP_ID};"):
            del lines[found[0]]
    for mime in record.get("added", []):
        found = _get(lines, ADDED, mime)
        if found is not None:
            apps = [a for a in found[1].split(";") if a and a != DESKTOP_ID]
            if apps:
                lines[found[0]] = f"{mime}={';'.join(apps)};"
            else:
                del lines[found[0]]
    for section in (DEFAULTS, ADDED):  # a section left empty goes too
        span = _section_span(lines, section)
        if span is not None and not any(line.strip() for line in lines[span[0] + 1 : span[1]]):
            del lines[span[0] : span[1]]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines and record.get("created"):
        os.remove(path)
        for folder in sorted(record.get("created_dirs", []), key=len, reverse=True):
            if os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)
        return [f"removed {path}"]
    _write_lines(path, lines)
    return [f"removed ckptview's associations from {path}"]


def _holds_user_files(folder: str) -> bool:
    """True when `folder` has something besides the databases update-*-database generate."""
    if os.path.basename(folder) == "applications":
        return any(name != "mimeinfo.cache" for name in os.listdir(folder))
    packages = os.path.join(folder, "packages")
    return os.path.isdir(packages) and bool(os.listdir(packages))


def _missing_dirs(folder: str) -> list[str]:
    missing = []
    while folder and not os.path.exists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return list(reversed(missing))


def _read_manifest(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}  # not our manifest's shape: as if there were none


def _refresh(base: str) -> list[str]:
    lines = []
    for tool, folder in (("update-mime-database", "mime"), ("update-desktop-database", "applications")):
        exe = shutil.which(tool)
        target = os.path.join(base, folder)
        if exe and os.path.isdir(target):
            result = subprocess.run([exe, target], capture_output=True, text=True, timeout=60, check=False)
            lines.append(f"ran {tool}" if result.returncode == 0 else
                         f"{tool} failed: {result.stderr.strip() or result.returncode}")
    return lines
