"""Tab titles that tell files of one name apart (issue 35, finding 8): `titles.distinct_titles`."""

from __future__ import annotations

import os

from ckptview.core.session.titles import distinct_titles


def test_the_shortest_parent_path_that_tells_names_apart():
    j = os.path.join
    paths = [j("/r", "run_a", "ckpt", "model.pth"), j("/r", "run_b", "ckpt", "model.pth"),
             j("/r", "run_b", "best", "model.pth"), j("/r", "other.pth")]
    assert distinct_titles(paths) == [j("run_a", "ckpt", "model.pth"), j("run_b", "ckpt", "model.pth"),
                                      j("best", "model.pth"), "other.pth"]
    assert distinct_titles([paths[0], paths[0]]) == ["model.pth", "model.pth"]  # one file twice: its name


def test_urls_are_told_apart_by_their_path_with_slashes():
    urls = ["https://host/a/model.safetensors", "hf://org/repo/model.safetensors", "/local/model.safetensors"]
    assert distinct_titles(urls) == ["a/model.safetensors", "repo/model.safetensors",
                                     os.path.join("local", "model.safetensors")]


def test_many_files_of_different_names_keep_their_names():
    paths = [f"/runs/ckpt_{i:04d}.pt" for i in range(2000)] + ["/a/x.pt", "/b/x.pt"]
    titles = distinct_titles(paths)
    assert titles[:2000] == [f"ckpt_{i:04d}.pt" for i in range(2000)]
    assert titles[2000:] == [os.path.join("a", "x.pt"), os.path.join("b", "x.pt")]
