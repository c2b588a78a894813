"""A Hugging Face index is parsed within a bound set by what its shards can hold (issue 24, finding 19).

An index just under the 256 MiB read limit holding ~21 million tiny keys was parsed whole: `info FOLDER`
peaked at 4.3 GB before saying that no shard opens. Its structure is now counted before it is parsed
(commas, colons and brackets bound how many JSON values it holds), against a limit of what the shard
files in its folder can describe; past it, one line and no parse.
"""

from __future__ import annotations

import json
import re
import tracemalloc

import pytest
from safetensors.torch import save_file

from ckptview.cli import main
from ckptview.core.errors import CheckpointFormatError
from ckptview.core.read.formats import hf_sharded
from ckptview.core.read.open import open_checkpoint


def _hostile(folder, keys: int, shard: str = "s") -> int:
    """An index of `keys` tiny names, all naming `shard`; returns its size."""
    folder.mkdir(exist_ok=True)
    body = ",".join(f'"{i:x}":"{shard}"' for i in range(keys))
    raw = ('{"metadata": {"total_size": 1}, "weight_map": {' + body + "}}").encode()
    (folder / "model.safetensors.index.json").write_bytes(raw)
    return len(raw)


def test_an_index_of_millions_of_tiny_keys_is_refused_before_it_is_parsed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(hf_sharded, "INDEX_PIECE", 1 << 20)
    folder = tmp_path / "hub"
    size = _hostile(folder, 400_000)  # no shard at all: it can describe nothing
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointFormatError, match="index") as err:
            open_checkpoint(folder)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(err.value)
    assert "\n" not in message and re.search(r"can hold \(at most 100,000 .*; 1\d\d,\d+ in its first", message)
    # Parsed whole, 400,000 names and their values cost ~40 MB; counted, the pieces read until the count
    # passed the limit (the second MiB of a 4.7 MB file).
    assert peak < 4 * hf_sharded.INDEX_PIECE < size, (peak, size)
    assert main(["info", str(folder)]) == 2
    got = capsys.readouterr()
    assert got.out == "" and got.err.count("\n") == 1 and "index" in got.err


def test_the_bound_follows_the_shards_present(tmp_path, monkeypatch):
    monkeypatch.setattr(hf_sharded, "MIN_INDEX_ENTRIES", 50)
    folder = tmp_path / "hub"
    folder.mkdir()
    tensors = {f"w{i}": __import__("torch").ones(1) for i in range(300)}
    save_file(tensors, folder / "model.safetensors")
    index = {"metadata": {"total_size": 1200}, "weight_map": dict.fromkeys(tensors, "model.safetensors")}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = open_checkpoint(folder)  # 300 names over a shard that holds them: past the floor, within the bound
    assert sorted(e.name for e in ckpt.tensors()) == sorted(tensors)
    ckpt.close()
    index["weight_map"].update({f"ghost{i}": "model.safetensors" for i in range(200_000)})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointFormatError, match="lists more entries than the shard files beside it can hold"):
        open_checkpoint(folder)


def test_a_real_sized_index_without_its_shards_still_opens_with_warnings(tmp_path):
    """Below the floor the shards present do not matter: an index downloaded with one shard of many opens."""
    folder = tmp_path / "hub"
    folder.mkdir()
    save_file({"a": __import__("torch").ones(2)}, folder / "model-00001-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors"}
    weight_map.update({f"layers.{i}.weight": "model-00002-of-00002.safetensors" for i in range(20_000)})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    ckpt = open_checkpoint(folder)
    assert [e.name for e in ckpt.tensors()] == ["a"]
    assert any("missing" in w for w in ckpt.warnings)
    ckpt.close()


def test_a_remote_index_gets_the_fixed_limit(tmp_path, monkeypatch, capsys):
    """Over http the shards' sizes are not asked for (a request each): the index gets MAX_INDEX_ENTRIES."""
    pytest.importorskip("fsspec")
    from tests.support.remote_server import RangeServer

    monkeypatch.setattr(hf_sharded, "MIN_INDEX_ENTRIES", 1000)
    monkeypatch.setattr(hf_sharded, "MAX_INDEX_ENTRIES", 5000)
    monkeypatch.setattr(hf_sharded, "INDEX_PIECE", 4096)
    big, small = tmp_path / "big", tmp_path / "small"
    _hostile(big, 20_000)
    _hostile(small, 3000, shard="model.safetensors")
    save_file({"0": __import__("torch").ones(1)}, small / "model.safetensors")
    server = RangeServer(str(tmp_path))
    try:
        assert main(["info", f"{server.url}/big/model.safetensors.index.json"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "more entries than a remote index may (5,000;" in err, err
        # Refused after the first pieces, not after the whole index.
        assert server.counters.bytes < (big / "model.safetensors.index.json").stat().st_size // 2
        assert main(["info", "--json", f"{server.url}/small/model.safetensors.index.json"]) == 0
        assert [t["name"] for t in json.loads(capsys.readouterr().out)["tensors"]] == ["0"]
    finally:
        server.stop()
