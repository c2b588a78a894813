"""The window's workspace: a checkpoint opened once while its file is unchanged, shared, let go (no Qt)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

from ckptview.core.errors import Cancelled, NotACheckpointError
from ckptview.core.read import open as open_module
from ckptview.core.read.values.reading import read_values
from ckptview.core.session.workspace import Holdings, Lease, Workspace


def save(path, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    state = {"w": torch.randn(6, 5, generator=g), "b": torch.randn(5, generator=g)}
    torch.save(state, path)
    return state


def values(lease: Lease, name: str) -> np.ndarray:
    return np.asarray(read_values(lease.checkpoint.tensor(name)))


class Counting:
    """An opener that records each path it opens (the workspace's opens are what is counted)."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str):
        self.paths.append(path)
        return open_module.open_checkpoint(path)


@pytest.fixture
def one(tmp_path) -> tuple[str, dict[str, torch.Tensor]]:
    path = str(tmp_path / "a.pt")
    return path, save(path, 0)


def test_the_same_file_asked_twice_is_opened_once(one) -> None:
    path, state = one
    opener = Counting()
    ws = Workspace(opener)
    first, second = ws.acquire(path), ws.acquire(path)
    try:
        assert opener.paths == [path] and ws.opens == 1
        assert second.checkpoint is first.checkpoint
        assert second.analysis is first.analysis  # one Analysis per checkpoint: figures computed once
        assert np.array_equal(values(second, "w"), state["w"].numpy())
        assert ws.holders(path) == 2
    finally:
        first.release()
        second.release()


def test_a_touched_or_rewritten_file_is_opened_again_with_what_it_holds_now(one, tmp_path) -> None:
    path, _ = one
    opener = Counting()
    ws = Workspace(opener)
    first = ws.acquire(path)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: not the file that was opened
    touched = ws.acquire(path)
    assert touched.checkpoint is not first.checkpoint and len(opener.paths) == 2
    # Rewritten in place with other values of the same size (a later save; its mtime moves on).
    newer = save(path, 1)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    rewritten = ws.acquire(path)
    assert rewritten.checkpoint is not touched.checkpoint and len(opener.paths) == 3
    assert np.array_equal(values(rewritten, "w"), newer["w"].numpy())
    assert np.array_equal(values(rewritten, "w"), torch.load(path, weights_only=True)["w"].numpy())
    # Replaced by another file (a new inode, as an atomic save does).
    latest = save(str(tmp_path / "next.pt"), 2)
    os.replace(tmp_path / "next.pt", path)
    replaced = ws.acquire(path)
    assert replaced.checkpoint is not rewritten.checkpoint and len(opener.paths) == 4
    assert np.array_equal(values(replaced, "b"), latest["b"].numpy())
    # A holder of an older one keeps it until it lets go; what is served is the newest only.
    assert first.checkpoint.tensor("w") is not None and ws.open_paths() == [path]
    for lease in (first, touched, rewritten, replaced):
        lease.release()
    assert ws.open_paths() == []


def test_the_last_release_closes_and_forgets_the_checkpoint(one) -> None:
    path, _ = one
    opener = Counting()
    ws = Workspace(opener)
    first, second = ws.acquire(path), ws.acquire(path)
    checkpoint = first.checkpoint
    assert first.release() is False  # the other holder still has it
    assert first.release() is False  # releasing twice lets go once
    assert ws.in_use(checkpoint) and ws.open_paths() == [path]
    assert second.release() is True  # the last one: closed
    assert not ws.in_use(checkpoint) and ws.open_paths() == [] and ws.holders(path) == 0
    again = ws.acquire(path)
    assert again.checkpoint is not checkpoint and len(opener.paths) == 2
    again.release()


def test_two_threads_asking_at_once_share_one_open(one) -> None:
    path, state = one
    entered, go = threading.Event(), threading.Event()
    opened: list[str] = []

    def slow(p: str):
        opened.append(p)
        entered.set()
        go.wait()
        return open_module.open_checkpoint(p)

    ws = Workspace(slow)
    leases: list[Lease | None] = [None, None]

    def ask(i: int) -> None:
        leases[i] = ws.acquire(path)

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    entered.wait()  # the first is inside its open
    second = threading.Thread(target=ask, args=(1,))
    second.start()
    while ws.holders(path) < 2 and len(opened) < 2:  # the second waits for the first's open (or opens: wrong)
        go.wait(0.001)
    go.set()
    first.join()
    second.join()
    assert opened == [path]
    assert leases[0] is not None and leases[1] is not None
    assert leases[0].checkpoint is leases[1].checkpoint
    assert np.array_equal(values(leases[1], "w"), state["w"].numpy())
    leases[0].release()
    leases[1].release()
    assert ws.open_paths() == []


def test_a_file_that_fails_to_open_leaves_nothing_behind(tmp_path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a checkpoint\n")
    ws = Workspace()
    for _ in range(2):  # asked again: opened (and refused) again, never served from a failed open
        with pytest.raises(NotACheckpointError):
            ws.acquire(str(bad))
    assert ws.open_paths() == [] and ws.holders(str(bad)) == 0


def test_remote_urls_are_not_shared(one) -> None:
    path, _ = one
    asked: list[str] = []

    def fake_remote(url: str):  # no network: a local file stands for what the URL would give
        asked.append(url)
        return open_module.open_checkpoint(path)

    ws = Workspace(fake_remote)
    url = "https://127.0.0.1:1/a.pt"
    first, second = ws.acquire(url), ws.acquire(url)
    assert asked == [url, url] and first.checkpoint is not second.checkpoint
    assert ws.open_paths() == []
    assert first.release() is True and second.release() is True  # each closes its own


def test_holdings_keep_a_bounded_number_and_reopen_only_what_changed(tmp_path) -> None:
    paths = [str(tmp_path / f"c{i}.pt") for i in range(3)]
    for i, p in enumerate(paths):
        save(p, i)
    opener = Counting()
    ws = Workspace(opener)
    held = Holdings(ws, limit=2)
    first = held.checkpoint(paths[0])
    assert held.checkpoint(paths[0]) is first and opener.paths == [paths[0]]  # held: not opened again
    held.checkpoint(paths[1])
    held.checkpoint(paths[2])  # past the limit: the least recently used is let go
    assert not ws.in_use(first) and sorted(ws.open_paths()) == paths[1:]
    st = os.stat(paths[1])
    newer = save(paths[1], 9)
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    lease = held.lease(paths[1])  # changed on disk: opened again, the old one let go
    assert np.array_equal(values(lease, "w"), newer["w"].numpy())
    assert opener.paths == [paths[0], paths[1], paths[2], paths[1]]
    held.release()
    assert ws.open_paths() == []
    with pytest.raises(Cancelled):  # the run's tab is gone: nothing more is held for it
        held.checkpoint(paths[0])
    assert ws.open_paths() == []
    # Huge checkpoints: a bound on the tensors held too (the last two always kept, a run reads pairs).
    few = Holdings(ws, limit=10, max_tensors=3)  # each file holds 2 tensors
    for p in paths:
        few.checkpoint(p)
    assert sorted(ws.open_paths()) == paths[1:]
    few.release()


def test_a_folder_is_opened_again_when_one_of_its_shards_changes(tmp_path) -> None:
    import json

    from safetensors.torch import save_file

    folder = tmp_path / "sharded"
    folder.mkdir()
    shards = {"model-00001-of-00002.safetensors": {"a.weight": torch.ones(2, 3)},
              "model-00002-of-00002.safetensors": {"b.weight": torch.zeros(4)}}
    for file, tensors in shards.items():
        save_file(tensors, str(folder / file))
    weight_map = {name: file for file, tensors in shards.items() for name in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    opener = Counting()
    ws = Workspace(opener)
    first, again = ws.acquire(str(folder)), ws.acquire(str(folder))
    assert again.checkpoint is first.checkpoint and len(opener.paths) == 1
    second_shard = folder / "model-00002-of-00002.safetensors"
    st = os.stat(second_shard)
    save_file({"b.weight": torch.full((4,), 7.0)}, str(second_shard))  # the same size, other values
    os.utime(second_shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    changed = ws.acquire(str(folder))
    assert changed.checkpoint is not first.checkpoint and len(opener.paths) == 2
    assert values(changed, "b.weight").tolist() == [7.0] * 4
    for lease in (first, again, changed):
        lease.release()
    assert ws.open_paths() == []


def test_a_lease_dropped_without_release_lets_go_when_collected(one) -> None:
    import gc

    path, _ = one
    ws = Workspace()
    kept = ws.acquire(path)
    lost = ws.acquire(path)
    checkpoint = lost.checkpoint
    del lost  # a result that never reached its view
    gc.collect()
    assert ws.holders(path) == 1
    assert kept.release() is True and not ws.in_use(checkpoint)
