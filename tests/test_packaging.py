"""What the wheel ships: every package under src/ (found, not listed), the resources among them."""

from __future__ import annotations

import pathlib

import tomllib

from tests.support.paths import REPO as ROOT


def test_packages_are_found_under_src_only() -> None:
    """The src layout: setuptools finds the packages under src/, and nothing of the package lives outside it
    (a folder named like the package beside a script would shadow the installed one)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["packages"]["find"]["where"] == ["src"]
    assert "package-dir" not in config
    assert not (ROOT / "resources").exists()


def test_resources_are_found_where_the_package_is_installed() -> None:
    from ckptview.resources import resource_path

    for name in ("ckptview.svg", "example.pth", "ckptview.desktop", "ckptview.xml"):
        assert pathlib.Path(resource_path(name)).is_file(), name
