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
    assert globs == {"*.pth", "*.pt", "*.ckpt", "*.bin", "*.safetensors", "*.pt2"}
    assert types["application/x-pytorch-checkpoint"].find(f"{NS}magic") is not None
    assert (base / "icons" / "hicolor" / "scalable" / "apps" / "ckptview.svg").read_text().startswith("<svg")

    if refresh and shutil.which("update-mime-database"):
        globs2 = (base / "mime" / "globs2").read_text()
        assert "application/x-pytorch-checkpoint:*.pth" in globs2
        assert "application/x-safetensors:*.safetensors" in globs2
    desktop.install(refresh=refresh)  # installing twice is harmless
    desktop.uninstall(refresh=refresh)
    assert snapshot(base) == before
    assert (base / "keep.txt").read_text() == "the user's own file"
    assert "nothing to remove" in desktop.uninstall(refresh=refresh)[0]


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
    from ckptview.gui.app import main

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert main(["--install-desktop"]) == 0
    assert (tmp_path / "applications" / "ckptview.desktop").exists()
    assert main(["--uninstall-desktop"]) == 0
    assert os.listdir(tmp_path) == []
    assert "removed" in capsys.readouterr().out
