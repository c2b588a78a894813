"""Every file of the hostile and malformed corpora through `ckptview graph`: a graph or one line, no payload run."""

from __future__ import annotations

import json

import pytest

from ckptview import cli
from tests.support import corpus
from tests.support.cli_failure import failure_stdout


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> list[corpus.Case]:
    return corpus.shared("hostile", tmp_path_factory) + corpus.shared("malformed", tmp_path_factory)


def test_every_corpus_file_draws_or_is_refused_in_one_line(cases, capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing traced is kept past the test
    failures = []
    drawn = 0
    for case in cases:
        status = cli.main(["graph", str(case.path), "--json"])
        out = capsys.readouterr()
        if status == 0:
            drawn += 1
            data = json.loads(out.out)
            if set(data) != {"source", "nodes", "unread", "notes", "classes", "blocks"}:
                failures.append(f"{case.name}: not the contract: {sorted(data)}")
        elif status != 2 or not failure_stdout(out.out) or out.err.count("\n") != 1 or \
                not out.err.startswith("ckptview: "):
            failures.append(f"{case.name}: status {status}, stderr {out.err[:300]!r}")
        elif "internal error" in out.err:
            failures.append(f"{case.name}: {out.err.strip()[:300]}")
        if case.marker is not None and case.marker.exists():
            failures.append(f"{case.name}: THE PAYLOAD RAN")
    assert not failures, "\n".join(failures)
    assert drawn > len(cases) // 3  # most of them still draw: the honest parts of a hostile file
