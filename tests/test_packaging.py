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


def _pins(name: str) -> dict[str, str]:
    """A constraints file's pins, by normalised package name."""
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            package, version = line.split("==", 1)
            pins[package.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_the_vision_venv_pins_only_what_the_main_one_leaves_free() -> None:
    """The Makefile joins constraints.txt (less its torch pin) with constraints-vision.txt: a package pinned in
    both, at two versions, makes pip give up (a PyYAML pin left behind did, and `make test` failed)."""
    main, vision = _pins("constraints.txt"), _pins("constraints-vision.txt")
    assert {"torch", "torchvision", "timm"} <= vision.keys()
    assert sorted(name for name in vision.keys() & main.keys() if name != "torch") == []
