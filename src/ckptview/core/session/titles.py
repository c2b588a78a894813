"""Tab titles that tell files of one name apart: the shortest parent path that differs (Qt-free)."""

from __future__ import annotations

import os
import posixpath

from ckptview.core.read.bytes.location import locate


def _parts(path: str) -> list[str]:
    """The components of a local path or of a URL's path, last one first ('' parts dropped)."""
    if locate(path).is_remote:
        body = path.split("://", 1)[1].split("?", 1)[0]
        return [p for p in reversed(body.split("/")) if p]
    return [p for p in reversed(os.path.normpath(path).split(os.sep)) if p]


def distinct_titles(paths: list[str]) -> list[str]:
    """One title per path: its file name, with as many parent folders as tell it apart from every other
    path of the same name (the same path twice keeps its name alone). Paths are compared only with those
    of their own name: 150 tabs of different files cost 150 look-ups."""
    parts = [_parts(p) or [p] for p in paths]
    by_name: dict[str, list[int]] = {}
    for i, mine in enumerate(parts):
        by_name.setdefault(mine[0], []).append(i)
    out = []
    for i, mine in enumerate(parts):
        others = [parts[j] for j in by_name[mine[0]] if j != i and parts[j] != mine]
        depth = 1
        while others and depth < len(mine):
            if all(theirs[:depth] != mine[:depth] for theirs in others):
                break
            depth += 1
        sep = posixpath.sep if locate(paths[i]).is_remote else os.sep
        out.append(sep.join(reversed(mine[:depth])))
    return out
