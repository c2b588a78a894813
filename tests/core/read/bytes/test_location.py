"""A `Location` keeps a URL's token to itself, and no token outlives what holds it (issue 47, finding 4)."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch

from ckptview.core.read.bytes.location import Location, held_tokens, locate
from ckptview.core.read.open import open_checkpoint
from tests.support.remote_server import RangeServer

SECRET = "s3cretSIGNATURE"


def test_a_location_never_shows_its_token():
    location = locate(f"https://me:pw@host.example/run/m.pt?X-Amz-Signature={SECRET}")
    assert location.is_remote and location.shown == "https://host.example/run/m.pt"
    for text in (str(location), repr(location), f"{location}", f"{location!r}"):
        assert SECRET not in text and "pw" not in text, text
    assert location.reach == f"https://host.example/run/m.pt?X-Amz-Signature={SECRET}"  # userinfo dropped


def test_a_local_path_is_its_own_location():
    location = locate("/tmp/model.pt")
    assert not location.is_remote and location.shown == location.reach == str(location) == "/tmp/model.pt"
    assert not locate("file:///tmp/model.pt").is_remote  # a local file is given by its path


def test_a_shown_url_reaches_the_token_only_while_a_location_holds_it():
    shown = "https://host.example/lent/m.pt"
    held = locate(f"{shown}?token={SECRET}")
    assert locate(shown).reach == f"{shown}?token={SECRET}"
    locate(f"{shown}?token=other")  # a later mention, dropped at once, takes nothing away from the one held
    gc.collect()
    assert locate(shown).reach == f"{shown}?token={SECRET}"
    del held
    gc.collect()
    assert locate(shown).reach == shown and shown not in held_tokens()


def _strings_in(value, depth=0):
    """The strings reachable from a module-level value (containers, a few levels down; weak ones included)."""
    if depth > 4:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, (dict, weakref.WeakValueDictionary, weakref.WeakKeyDictionary)):
        for k, v in list(value.items()):
            yield from _strings_in(k, depth + 1)
            yield from _strings_in(v, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in list(value):
            yield from _strings_in(v, depth + 1)
    elif isinstance(value, Location):
        yield value.reach


def _module_state_with(secret: str) -> list[str]:
    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("ckptview"):
            continue
        for attr, value in list(vars(module).items()):
            if any(secret in s for s in _strings_in(value)):
                found.append(f"{name}.{attr}")
    return found


@pytest.fixture
def server(tmp_path):
    pytest.importorskip("fsspec")
    pytest.importorskip("requests")
    torch.save({"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}, tmp_path / "model.pt")
    srv = RangeServer(str(tmp_path))
    yield srv
    srv.stop()


def test_no_token_outlives_the_checkpoint_opened_with_it(server):
    """The token is requested with every read while the checkpoint is open, and is in no module's state once
    it is closed and dropped (it was kept, process-wide, in `remote/urls.py`'s `_REAL`)."""
    url = f"{server.url}/model.pt"
    ckpt = open_checkpoint(f"{url}?X-Amz-Signature={SECRET}")
    assert ckpt.path == url
    assert [e.name for e in ckpt.tensors()] == ["w"]
    assert server.counters.paths and all(f"X-Amz-Signature={SECRET}" in p for p in server.counters.paths)
    assert locate(url).reach.endswith(SECRET)  # held by the open's session: a reload reaches it
    ckpt.close()
    del ckpt
    gc.collect()
    assert url not in held_tokens() and locate(url).reach == url
    assert _module_state_with(SECRET) == []
