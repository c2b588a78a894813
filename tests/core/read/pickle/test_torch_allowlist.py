"""ckptview's copy of torch's weights-only allowlist is held against the installed torch's own lists.

`safe_globals.py` is data copied from torch. A torch upgrade that allows a new global (a new dtype) or
registers a new class must turn a test red, not drift silently: what torch allows and we don't treat as safe
is listed with a reason (`NOT_TRUSTED`), and anything the safe set allows that the installed torch does not
is a failure (a name a later torch added, `SINCE`, is safe only beside that torch). These tests run in
`.venv-vision` too (marked `vision`; `make test-vision`), so a second torch release is held to them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
import torch
from torch._weights_only_unpickler import _get_allowed_globals

from ckptview.core.read.pickle.safe_globals import (
    NOT_TRUSTED,
    SINCE,
    TORCH_REGISTERED_GLOBALS,
    TORCH_WEIGHTS_ONLY_GLOBALS,
)
from ckptview.core.read.pickle.torch_globals import SAFE_GLOBALS, installed_torch

pytestmark = pytest.mark.vision


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("+")[0].split(".")[:2])


INSTALLED = _version(torch.__version__)

# A clean interpreter imports every module of torch that registers classes with `add_safe_globals` at import
# time (found by reading torch's sources, so a new registering module is imported too) and prints the names.
_REGISTERED = r"""
import importlib, json, os, re, sys
import torch, torch.serialization
root = os.path.dirname(torch.__file__)
call = re.compile(r"^[^#\n]*\b_?add_safe_globals\(\[", re.M)
modules = []
for folder, _dirs, files in os.walk(root):
    for name in files:
        if not name.endswith(".py") or name.startswith("test"):
            continue
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
        dotted = dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted
        if ".testing" in dotted or dotted in ("torch.serialization", "torch._weights_only_unpickler"):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            if call.search(fh.read()):
                modules.append(dotted)
failed = {}
for dotted in modules:
    try:
        importlib.import_module(dotted)
    except Exception as exc:
        failed[dotted] = repr(exc)[:200]
names = set()
for item in torch.serialization.get_safe_globals():
    names.add(item[1] if isinstance(item, tuple) else f"{item.__module__}.{item.__qualname__}")
print(json.dumps({"modules": modules, "failed": failed, "names": sorted(names)}))
"""


@pytest.fixture(scope="module")
def registered() -> dict:
    out = subprocess.run([sys.executable, "-I", "-c", _REGISTERED], capture_output=True, text=True, timeout=600,
                         check=True)
    return json.loads(out.stdout)


def test_the_installed_torch_is_the_one_imported():
    assert installed_torch() == INSTALLED


def test_the_default_allowlist_is_torchs():
    theirs = set(_get_allowed_globals())
    ours = set(TORCH_WEIGHTS_ONLY_GLOBALS) & SAFE_GLOBALS
    untrusted = theirs - ours
    assert untrusted <= set(NOT_TRUSTED), (
        f"torch {torch.__version__} allows {sorted(untrusted - set(NOT_TRUSTED))}: emulate and list them in "
        "safe_globals.py, or list them in NOT_TRUSTED with the reason")
    assert ours - theirs == set(), f"the safe set allows {sorted(ours - theirs)}, torch {torch.__version__} does not"


def test_since_names_a_release_that_allows_them():
    """A name kept for a later torch is allowed by every torch from that release on, and is safe beside it only."""
    theirs = set(_get_allowed_globals())
    for name, release in SINCE.items():
        assert name in TORCH_WEIGHTS_ONLY_GLOBALS | TORCH_REGISTERED_GLOBALS
        if _version(release) <= INSTALLED:
            assert name in theirs, f"{name}: SINCE says torch {release} allows it; {torch.__version__} does not"
            assert name in SAFE_GLOBALS
        else:
            assert name not in theirs and name not in SAFE_GLOBALS, name


def test_a_file_is_safe_exactly_when_torch_loads_it_weights_only(tmp_path):
    """A file naming a dtype only a later torch knows (torch.bcomplex32, from 2.14): ckptview says it holds an
    unsafe global exactly where torch.load(weights_only=True) refuses it, and lists it either way."""
    import io

    from ckptview.core.read.open import open_checkpoint

    buf = io.BytesIO()
    torch.save({"dtype": torch.complex64, "w": torch.ones(2)}, buf, _use_new_zipfile_serialization=False)
    assert buf.getvalue().count(b"torch\ncomplex64\n") == 1  # the dtype is a GLOBAL opcode, newline-ended
    path = tmp_path / "later_dtype.pt"
    path.write_bytes(buf.getvalue().replace(b"torch\ncomplex64\n", b"torch\nbcomplex32\n"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            torch.load(path, weights_only=True)
        torch_loads = True
    except Exception:  # noqa: BLE001 - torch's refusal (an UnpicklingError) is what is compared
        torch_loads = False
    assert torch_loads == (INSTALLED >= (2, 14))
    ckpt = open_checkpoint(path)
    try:
        assert (ckpt.unsafe_globals == []) == torch_loads, ckpt.unsafe_globals
        assert str(ckpt.root.children[0].value) == "bcomplex32" and ckpt.tensor("w").shape == (2,)
    finally:
        ckpt.close()


@pytest.mark.slow  # imports torch._dynamo and torch.distributed.tensor in a fresh interpreter
def test_the_registered_classes_are_torchs(registered):
    assert not registered["failed"], registered["failed"]
    theirs = set(registered["names"])
    untrusted = theirs - TORCH_REGISTERED_GLOBALS - TORCH_WEIGHTS_ONLY_GLOBALS
    assert untrusted <= set(NOT_TRUSTED), (
        f"torch {torch.__version__} registers {sorted(untrusted - set(NOT_TRUSTED))} as safe: emulate them "
        "(TORCH_REGISTERED_GLOBALS) or list them in NOT_TRUSTED with the reason")
    beyond = (TORCH_REGISTERED_GLOBALS & SAFE_GLOBALS) - theirs
    assert not beyond, f"the safe set trusts {sorted(beyond)}; torch {torch.__version__} registers none of them"


def test_every_difference_says_why():
    for name, reason in NOT_TRUSTED.items():
        assert name not in TORCH_WEIGHTS_ONLY_GLOBALS | TORCH_REGISTERED_GLOBALS, name
        assert len(reason) > 30, f"{name}: say why it is not trusted"


def test_a_dtype_torch_allows_opens_as_torch_loads_it(tmp_path):
    """Every dtype in torch's allowlist opens with torch's values (bcomplex32 from torch 2.14 on)."""
    import numpy as np

    from ckptview.core.read.open import open_checkpoint
    from ckptview.core.read.values.reading import read_values

    dtypes = [getattr(torch, name.split(".", 1)[1]) for name in _get_allowed_globals()
              if name.startswith("torch.") and name.count(".") == 1
              and isinstance(getattr(torch, name.split(".", 1)[1], None), torch.dtype)]
    values = [1.5 - 2j, -0.25 + 4j]  # exact in every complex dtype
    saved = {}
    with warnings.catch_warnings():  # torch 2.14: "BComplex32 support is experimental"
        warnings.simplefilter("ignore", UserWarning)
        for dtype in dtypes:
            if dtype.is_complex:
                saved[str(dtype)] = torch.tensor(values, dtype=torch.complex64).to(dtype)
        path = tmp_path / "complex.pt"
        torch.save(saved, path)
        loaded = torch.load(path, weights_only=True)
    assert {t.dtype for t in loaded.values()} == {d for d in dtypes if d.is_complex}
    ckpt = open_checkpoint(path)
    try:
        assert ckpt.unsafe_globals == []
        for name in loaded:
            info = ckpt.tensor(name)
            assert info.dtype == name.removeprefix("torch.")
            assert np.array_equal(read_values(info), np.array(values)), name
    finally:
        ckpt.close()
