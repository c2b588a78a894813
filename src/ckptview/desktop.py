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

MIME_TYPES = ("application/x-pytorch-checkpoint", "application/x-safetensors")
MANIFEST = os.path.join("ckptview", "desktop-install.json")
RESOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "resources")

MIME_XML = """<?xml version="1.0" encoding="UTF-8"?>
<mime-info xmlns="http://www.freedesktop.org/standards/shared-mime-info">
  <mime-type type="application/x-pytorch-checkpoint">
    <comment>PyTorch checkpoint</comment>
    <icon name="ckptview"/>
    <glob pattern="*.pth"/>
    <glob pattern="*.pt"/>
    <glob pattern="*.ckpt"/>
    <glob pattern="*.pt2"/>
    <glob pattern="*.bin" weight="30"/>
    <magic priority="60">
      <!-- torch.save zip: the first record is <archive>/data.pkl (or .data/version) -->
      <match type="string" value="PK\\003\\004" offset="0">
        <match type="string" value="/data.pkl" offset="30:200"/>
        <match type="string" value="/.data/version" offset="30:200"/>
      </match>
      <!-- legacy torch.save: pickle protocol 2 followed by torch's magic number 0x1950a86a20f9469cfc6c -->
      <match type="string" value="\\x80\\x02\\x8a\\x0a\\x6c\\xfc\\x9c\\x46\\xf9\\x20\\x6a\\xa8\\x50\\x19" offset="0"/>
    </magic>
  </mime-type>
  <mime-type type="application/x-safetensors">
    <comment>safetensors tensors</comment>
    <icon name="ckptview"/>
    <glob pattern="*.safetensors"/>
  </mime-type>
</mime-info>
"""


def data_home() -> str:
    """`$XDG_DATA_HOME`, or `~/.local/share`."""
    return os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")


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


def desktop_entry() -> str:
    """The text of ckptview.desktop."""
    return "\n".join([
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.5",
        "Name=ckptview",
        "GenericName=Checkpoint Browser",
        "Comment=Browse PyTorch checkpoints without executing them",
        f"Exec={exec_command()} %F",
        "Icon=ckptview",
        "Terminal=false",
        "Categories=Development;Science;",
        "MimeType=" + "".join(t + ";" for t in MIME_TYPES),
        "StartupWMClass=ckptview",
        "",
    ])


def _targets(base: str) -> dict[str, str]:
    return {
        os.path.join(base, "applications", "ckptview.desktop"): desktop_entry(),
        os.path.join(base, "mime", "packages", "ckptview.xml"): MIME_XML,
        os.path.join(base, "icons", "hicolor", "scalable", "apps", "ckptview.svg"): _icon_text(),
    }


def _icon_text() -> str:
    with open(os.path.join(RESOURCES, "ckptview.svg"), encoding="utf-8") as fh:
        return fh.read()


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
    with open(manifest_path, "w", encoding="utf-8") as fh:
        json.dump({"files": files, "created_dirs": created_dirs}, fh, indent=1)
    lines = [f"installed {p}" for p in files]
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


def _read_manifest(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


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
