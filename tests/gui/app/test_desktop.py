"""`ckptview --install-desktop` / `--uninstall-desktop` with a temporary XDG_DATA_HOME."""

from __future__ import annotations

import configparser
import os
import shutil
import xml.etree.ElementTree as ET

import pytest

from ckptview import desktop

NS = "{http://www.freedesktop.org/standards/shared-mime-info}"


def snapshot(base) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), base) for d, _, files in os.walk(base) for f in files} | \
        {os.path.relpath(d, base) for d, _, _ in os.walk(base)}


@pytest.mark.parametrize("refresh", [False, True])
def test_install_writes_parseable_files_and_uninstall_leaves_nothing(tmp_path, monkeypatch, refresh):
    base = tmp_path / "share"
    base.mkdir()
    (base / "keep.txt").write_text("the user's own file")
    monkeypatch.setenv("XDG_DATA_HOME", str(base))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    before = snapshot(base)
    lines = desktop.install(refresh=refresh)
    assert any("ckptview.desktop" in line for line in lines)

    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # keys are case-sensitive in desktop files
    entry.read(base / "applications" / "ckptview.desktop")
    section = entry["Desktop Entry"]
    assert section["Type"] == "Application" and section["Icon"] == "ckptview"
    assert section["Exec"].endswith(" %F") and "ckptview" in section["Exec"]
    assert section["MimeType"].split(";")[:-1] == list(desktop.MIME_TYPES)

    root = ET.parse(base / "mime" / "packages" / "ckptview.xml").getroot()
    types = {t.get("type"): t for t in root.findall(f"{NS}mime-type")}
    assert set(types) == set(desktop.MIME_TYPES)
    globs = {g.get("pattern") for t in types.values() for g in t.findall(f"{NS}glob")}
    assert globs == {"*.pth", "*.pt", "*.ckpt", "*.safetensors", "*.pt2", "*.gguf"}  # *.bin only by its bytes
    assert types["application/x-pytorch-checkpoint"].find(f"{NS}magic") is not None
    assert (base / "icons" / "hicolor" / "scalable" / "apps" / "ckptview.svg").read_text().startswith("<svg")

    if refresh and shutil.which("update-mime-database"):
        globs2 = (base / "mime" / "globs2").read_text()
        assert "application/x-pytorch-checkpoint:*.pth" in globs2
        assert "application/x-safetensors:*.safetensors" in globs2
        assert "application/x-gguf:*.gguf" in globs2
    desktop.install(refresh=refresh)  # installing twice is harmless
    desktop.uninstall(refresh=refresh)
    assert snapshot(base) == before
    assert (base / "keep.txt").read_text() == "the user's own file"
    assert "nothing to remove" in desktop.uninstall(refresh=refresh)[0]


@pytest.fixture(autouse=True)
def _private_config(tmp_path, monkeypatch):
    # mimeapps.list lives under XDG_CONFIG_HOME: never touch the developer's own.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "private-config"))


def test_uninstall_keeps_folders_that_were_there_before(tmp_path):
    base = tmp_path / "share"
    (base / "applications").mkdir(parents=True)
    (base / "applications" / "other.desktop").write_text("[Desktop Entry]\n")
    desktop.install(str(base), refresh=False)
    desktop.uninstall(str(base), refresh=False)
    assert sorted(os.listdir(base)) == ["applications"]
    assert os.listdir(base / "applications") == ["other.desktop"]


def test_cli_flags_reach_the_installer(tmp_path, monkeypatch, capsys):
    pytest.importorskip("PySide6")
    from ckptview.cli import main  # the window's flags: parsed there, handed to gui/app/launch.py

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert main(["--install-desktop"]) == 0
    assert (tmp_path / "applications" / "ckptview.desktop").exists()
    assert main(["--uninstall-desktop"]) == 0
    assert os.listdir(tmp_path) == []
    assert "removed" in capsys.readouterr().out


def test_mimeapps_list_makes_the_association_without_desktop_database_tools(tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.mkdir()
    mimeapps = config / "mimeapps.list"
    mimeapps.write_text("[Default Applications]\napplication/x-safetensors=other.desktop;\n"
                        "text/plain=editor.desktop;\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setattr(shutil, "which", lambda _tool: None)  # no update-desktop-database here
    lines = desktop.install(str(tmp_path / "share"))
    parsed = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parsed.optionxform = str
    parsed.read(mimeapps)
    defaults, added = parsed["Default Applications"], parsed["Added Associations"]
    assert defaults["application/x-pytorch-checkpoint"] == "ckptview.desktop;"
    assert defaults["application/x-safetensors"] == "other.desktop;"  # the user's own choice is kept
    assert defaults["text/plain"] == "editor.desktop;"
    assert added["application/x-safetensors"] == "ckptview.desktop;"  # offered in "Open With"
    assert any("kept your own default application for application/x-safetensors" in line for line in lines)
    desktop.uninstall(str(tmp_path / "share"))
    assert mimeapps.read_text() == ("[Default Applications]\napplication/x-safetensors=other.desktop;\n"
                                    "text/plain=editor.desktop;\n")


def test_a_torch_bin_file_is_claimed_by_its_magic_not_its_name(tmp_path):
    torch = pytest.importorskip("torch")
    root = ET.fromstring(desktop.mime_xml())
    checkpoint = next(t for t in root.findall(f"{NS}mime-type") if t.get("type") == desktop.MIME_TYPES[0])
    [zip_match] = [m for m in checkpoint.iter(f"{NS}match") if m.get("value") == "PK\\003\\004"]
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.zeros(2)}, path)
    head = path.read_bytes()[:256]
    assert head.startswith(b"PK\x03\x04")
    assert any(m.get("value").encode() in head[30:200] for m in zip_match.findall(f"{NS}match"))
