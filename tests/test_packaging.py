"""What the wheel ships: every package under src/, and the top-level resources/ as ckptview.resources."""

from __future__ import annotations

import pathlib

import tomllib

from tests.support.paths import REPO as ROOT


def test_every_package_under_src_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src").rglob("__init__.py")}
    assert found | {"ckptview.resources"} == set(config["packages"])
    assert config["package-dir"]["ckptview.resources"] == "resources"


def test_resources_are_found_where_the_package_is_installed() -> None:
    from ckptview.resources import resource_path

    for name in ("ckptview.svg", "example.pth", "make_example.py"):
        assert pathlib.Path(resource_path(name)).is_file(), name
