"""Generate the hostile and malformed corpora into a folder (nothing binary is committed).

`make_hostile(folder)` writes files whose pickles would run code (each payload creates its own marker
file if it ever runs); `make_malformed(folder)` writes broken files. Both return a list of cases that
say what ckptview must do with each file. Run `python tests/support/corpus.py OUT` to keep a copy.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import shlex
import struct
import sys
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Case:
    """One corpus file and the behaviour expected of ckptview."""

    name: str
    path: Path
    # Substrings (any one, case-insensitive) of the expected one-line error; None: the file opens.
    error: tuple[str, ...] | None = None
    # Globals that must be reported in `unsafe_globals` (hostile files).
    unsafe: tuple[str, ...] = ()
    # A file the payload would create if it ran; it must never exist.
    marker: Path | None = None
    # Tensors that must open but be marked broken / must read their exact values.
    broken: tuple[str, ...] = ()
    good: dict[str, np.ndarray] = field(default_factory=dict)
    # Truncations may legitimately either fail or open with every tensor broken.
    error_or_broken: bool = False
    # A zip cut short: refused naming `error` (data.pkl is cut), or listed from the records before the cut
    # with a warning saying so (`warning`) and the tensors the cut took marked broken.
    salvaged: bool = False
    warning: str | None = None  # a substring expected in `warnings`
    value: str | None = None  # a substring expected in the repr of some plain value
    fmt: str | None = None  # the format it must open as


# -- raw building blocks ---------------------------------------------------------------------------

class Payload:
    """Pickles as `func(*args)`: what a malicious `__reduce__` does. Callable so payloads can nest."""

    def __init__(self, func: Any, args: tuple) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args

    def __call__(self, *args: Any) -> None:  # pickle only checks that the reduce target is callable
        raise AssertionError("never called")


def global_call(module: str, name: str, args: tuple) -> bytes:
    """A protocol-0 pickle body that calls `module.name(*args)`, without its STOP."""
    return emit(Call(G(f"{module}.{name}"), *args))


class G:
    """A global named in a hand-written pickle (never looked up here: test runners patch builtins)."""

    def __init__(self, dotted: str) -> None:
        self.module, _, self.name = dotted.rpartition(".")


class Call:
    """`func(*args)` in a hand-written pickle; `func` may itself be a Call."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args


def emit(value: Any) -> bytes:
    """Protocol-0 opcodes that push `value` (G, Call, or any plain picklable value)."""
    if isinstance(value, G):
        return f"c{value.module}\n{value.name}\n".encode()
    if isinstance(value, Call):
        return emit(value.func) + b"(" + b"".join(emit(a) for a in value.args) + b"tR"
    return pickle.dumps(value, protocol=0)[:-1]  # its PUTs only overwrite memo slots nobody reads


def shell_touch(marker: Path) -> str:
    return f"touch {shlex.quote(str(marker))}"


def py_touch(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').close()"


def raw_zip(path: Path, entries: list[tuple[str, bytes]], *, deflate: set[str] = frozenset(),
            sizes: dict[str, tuple[int, int]] | None = None) -> None:
    """A zip written byte by byte, so names may repeat and declared sizes/CRCs may lie.

    `deflate` names members to compress; `sizes` overrides (uncompressed size, crc) of members whose
    stored bytes are already a raw deflate stream.
    """
    sizes = sizes or {}
    out = io.BytesIO()
    central = []
    for name, data in entries:
        raw_name = name.encode()
        method = 8 if name in deflate or name in sizes else 0
        if name in sizes:
            body, (usize, crc) = data, sizes[name]
        elif method == 8:
            comp = zlib.compressobj(6, zlib.DEFLATED, -15)
            body, usize, crc = comp.compress(data) + comp.flush(), len(data), zlib.crc32(data)
        else:
            body, usize, crc = data, len(data), zlib.crc32(data)
        offset = out.tell()
        out.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(body), usize,
                              len(raw_name), 0) + raw_name + body)
        central.append(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, crc, len(body),
                                   usize, len(raw_name), 0, 0, 0, 0, 0, offset) + raw_name)
    cd_offset = out.tell()
    for record in central:
        out.write(record)
    out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(central), len(central),
                          out.tell() - cd_offset, cd_offset, 0))
    path.write_bytes(out.getvalue())


def zip_members(path: Path) -> list[tuple[str, bytes]]:
    """Every member of a zip, in order."""
    with zipfile.ZipFile(path) as zf:
        return [(info.filename, zf.read(info)) for info in zf.infolist()]


def replace_member(src: Path, dst: Path, suffix: str, transform: Any) -> None:
    """Copy a zip, passing the member whose name ends with `suffix` through `transform`."""
    raw_zip(dst, [(n, transform(d) if n.endswith(suffix) else d) for n, d in zip_members(src)])


def prepend_payload(data_pkl: bytes, body: bytes) -> bytes:
    """Run `body` (pushes one value), POP it, then continue with the original pickle."""
    assert data_pkl[:1] == b"\x80"
    return data_pkl[:2] + body + b"0" + data_pkl[2:]


class _FakeStorage:
    def __init__(self, key: str, numel: int, cls: str = "FloatStorage") -> None:
        self.key, self.numel, self.cls = key, numel, cls


class _FakeTensor:
    """Pickles exactly as torch writes a tensor, with any shape/stride/offset we like."""

    def __init__(self, storage: _FakeStorage, offset: int, size: tuple, stride: tuple) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def __reduce__(self) -> tuple:
        import torch

        return torch._utils._rebuild_tensor_v2, (self.storage, self.offset, self.size, self.stride, False,
                                                 collections.OrderedDict())


class _TorchPickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _FakeStorage):
            import torch

            return ("storage", getattr(torch, obj.cls), obj.key, "cpu", obj.numel)
        return None


def torch_data_pkl(obj: Any) -> bytes:
    """data.pkl for `obj`, whose _FakeTensor leaves become torch tensor records."""
    buf = io.BytesIO()
    _TorchPickler(buf, protocol=2).dump(obj)
    return buf.getvalue()


def crafted_zip(path: Path, obj: Any, records: dict[str, bytes], *, root: str = "archive",
                deflate: set[str] = frozenset(), sizes: dict[str, tuple[int, int]] | None = None) -> None:
    """A torch zip checkpoint around a hand-made data.pkl and storage records."""
    entries = [(f"{root}/data.pkl", torch_data_pkl(obj)), (f"{root}/byteorder", b"little")]
    entries += [(f"{root}/data/{k}", v) for k, v in records.items()]
    entries.append((f"{root}/version", b"3\n"))
    raw_zip(path, entries, deflate={f"{root}/data/{k}" for k in deflate},
            sizes={f"{root}/data/{k}": v for k, v in (sizes or {}).items()})


GOOD = np.arange(6, dtype=np.float32).reshape(2, 3)


def _with_good(bad: Any) -> tuple[dict, dict[str, bytes]]:
    """A state dict holding one fine tensor 'good' (storage 0) and `bad`."""
    good = _FakeTensor(_FakeStorage("0", 6), 0, (2, 3), (3, 1))
    return {"good": good, "bad": bad}, {"0": GOOD.tobytes()}


def zero_bomb(inflated: int) -> tuple[bytes, int]:
    """A raw deflate stream of `inflated` zero bytes (a multiple of 16 MiB), and its CRC.

    Full-flush blocks are independent, so one compressed block of 16 MiB of zeros repeats.
    """
    block = 16 << 20
    zeros = bytes(block)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = comp.compress(zeros) + comp.flush(zlib.Z_FULL_FLUSH)
    tail = comp.flush()
    crc = 0
    for _ in range(inflated // block):
        crc = zlib.crc32(zeros, crc)
    return piece * (inflated // block) + tail, crc


# -- reference checkpoints made by torch ------------------------------------------------------------

def reference_state() -> dict[str, Any]:
    """A small state dict with the shapes/dtypes that matter (bf16, non-contiguous, shared storage)."""
    import torch

    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    return {
        "fc.weight": base,
        "fc.weight_t": base.t(),  # shares storage, non-contiguous
        "fc.bias": torch.randn(6, generator=g).to(torch.bfloat16),
        "steps": torch.tensor(7, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "meta": {"epoch": 3, "lr": 0.1, "name": "ref"},
    }


def make_reference(folder: Path) -> dict[str, Path]:
    """One valid file per format (fuzzing seeds): torch-zip, legacy, TorchScript, safetensors, pickle."""
    import torch
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = reference_state()
    out = {"torch-zip": folder / "ref_zip.pth", "torch-legacy": folder / "ref_legacy.pth",
           "torchscript": folder / "ref_script.pt", "safetensors": folder / "ref.safetensors",
           "pickle": folder / "ref_plain.pkl"}
    torch.save(state, out["torch-zip"])
    torch.save(state, out["torch-legacy"], _use_new_zipfile_serialization=False)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(torch.nn.Linear(3, 2), torch.zeros(1, 3)), str(out["torchscript"]))
    save_file({"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, -2, 3], dtype=np.int64)},
              str(out["safetensors"]), metadata={"format": "np"})
    out["pickle"].write_bytes(pickle.dumps({"weights": [1.5, 2.5], "cfg": {"layers": 2, "tag": b"x"}}, protocol=4))
    return out


# -- the hostile corpus -----------------------------------------------------------------------------

def make_hostile(folder: Path) -> list[Case]:
    """Files whose pickles would run code; each payload would create `<name>.RAN` in `folder`."""
    import os as _os
    import runpy
    import subprocess

    import torch

    folder.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def marker(name: str) -> Path:
        return folder / f"{name}.RAN"

    def add(name: str, data: bytes, unsafe: tuple[str, ...], suffix: str = ".pth", **kw: Any) -> Case:
        path = folder / f"{name}{suffix}"
        path.write_bytes(data)
        case = Case(name, path, unsafe=unsafe, marker=marker(name), **kw)
        cases.append(case)
        return case

    def dumps(obj: Any, proto: int = 2) -> bytes:
        return pickle.dumps(obj, protocol=proto)

    # Direct calls of the usual escape hatches.
    m = marker("os_system")
    add("os_system", global_call("os", "system", (shell_touch(m),)) + b".", ("os.system",))
    m = marker("posix_system")
    add("posix_system", dumps(Payload(_os.system, (shell_touch(m),))), ("posix.system",))
    m = marker("posix_system_p4")
    add("posix_system_p4", dumps(Payload(_os.system, (shell_touch(m),)), 4), ("posix.system",))
    for fname in ("Popen", "run", "check_output"):
        name = f"subprocess_{fname}"
        add(name, dumps(Payload(getattr(subprocess, fname), (["touch", str(marker(name))],))),
            (f"subprocess.{fname}",))
    add("builtins_exec", dumps(Payload(exec, (py_touch(marker("builtins_exec")),))), ("builtins.exec",))
    add("builtins_eval", dumps(Payload(eval, (py_touch(marker("builtins_eval")),))), ("builtins.eval",))
    # getattr(__import__('os'), 'system')(cmd): calls whose callables are results of other calls.
    chain = Call(Call(G("builtins.getattr"), Call(G("builtins.__import__"), "os"), "system"),
                 shell_touch(marker("builtins_getattr")))
    add("builtins_getattr", emit(chain) + b".", ("builtins.getattr", "builtins.__import__"))
    chain = Call(Call(G("builtins.getattr"), Call(G("builtins.__import__"), "subprocess"), "check_call"),
                 ["touch", str(marker("builtins_import"))])
    add("builtins_import", b"\x80\x02" + emit(chain) + b".", ("builtins.__import__",))
    code = Call(G("builtins.compile"), py_touch(marker("builtins_compile")), "<payload>", "exec")
    add("builtins_compile", emit(Call(G("builtins.exec"), code)) + b".", ("builtins.exec", "builtins.compile"))
    # open(marker, 'w') creates the marker by itself.
    add("builtins_open", global_call("builtins", "open", (str(marker("builtins_open")), "w")) + b".",
        ("builtins.open",))
    add("io_open", dumps(Payload(open, (str(marker("io_open")), "w"))), ("io.open",))
    chain = Call(Call(G("builtins.getattr"), Call(G("importlib.import_module"), "os"), "system"),
                 shell_touch(marker("importlib")))
    add("importlib", emit(chain) + b".", ("importlib.import_module",))
    add("runpy", dumps(Payload(runpy._run_code, (py_touch(marker("runpy")), {}))), ("runpy._run_code",))
    # A pickle inside a pickle: the inner bytes are data to us, the outer loads() is what is unsafe.
    inner = global_call("os", "system", (shell_touch(marker("pickle_loads")),)) + b"."
    add("pickle_loads", global_call("pickle", "loads", (inner,)) + b".", ("pickle.loads",))
    inner = global_call("os", "system", (shell_touch(marker("_pickle_loads")),)) + b"."
    # pickle writes `_pickle.loads` as `pickle loads` (protocol 2 name mapping); that is what would run.
    add("_pickle_loads", dumps(Payload(pickle.loads, (inner,))), ("pickle.loads",))

    # Old protocols: INST (protocol 0) and OBJ (protocol 1) call the class with the marked arguments.
    cmd = shell_touch(marker("inst_p0")).encode()
    add("inst_p0", b"(V" + cmd + b"\nios\nsystem\n.", ("os.system",))
    cmd = shell_touch(marker("obj_p1")).encode()
    add("obj_p1", b"(cos\nsystem\nV" + cmd + b"\no.", ("os.system",))
    # Memo tricks: a global memoized, popped, fetched later as a callable; a safe memo slot overwritten.
    cmd = shell_touch(marker("memo_get")).encode()
    add("memo_get", b"(dp0\ncos\nsystem\np1\n0Vx\ng1\n(V" + cmd + b"\ntRs.", ("os.system",))
    cmd = shell_touch(marker("memo_overwrite")).encode()
    add("memo_overwrite", b"\x80\x02ccollections\nOrderedDict\nq\x000cos\nsystem\nq\x000h\x00(X"
        + struct.pack("<I", len(cmd)) + cmd + b"tR.", ("os.system",))
    cmd = shell_touch(marker("memo_stack_global")).encode()
    add("memo_stack_global", b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94" + b"0" + b"h\x02"
        + b"\x8c" + bytes([len(cmd)]) + cmd + b"\x85R.", ("os.system",))

    # A payload hidden deep inside an otherwise normal training checkpoint: the tensors still open.
    g = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(3, 4, generator=g), torch.randn(3, generator=g)
    deep = {"model": {"encoder": {"layers": [{"weight": weight, "bias": bias,
                                                "extra": {"hooks": [Payload(_os.system,
                                                                            (shell_touch(marker("deep_state_dict")),))]}}]}},
            "epoch": 4}
    path = folder / "deep_state_dict.pth"
    torch.save(deep, path)
    good = {"model.encoder.layers.0.weight": weight.numpy(), "model.encoder.layers.0.bias": bias.numpy()}
    cases.append(Case("deep_state_dict", path, unsafe=("posix.system",), marker=marker("deep_state_dict"),
                      good=good, fmt="torch-zip"))

    # The same payload spliced into the data.pkl of a real state dict zip (before its real content).
    plain = folder / "_plain_state.pth"
    torch.save({"weight": weight, "bias": bias}, plain)
    path = folder / "zip_spliced.pth"
    body = global_call("os", "system", (shell_touch(marker("zip_spliced")),))
    replace_member(plain, path, "/data.pkl", lambda d: prepend_payload(d, body))
    cases.append(Case("zip_spliced", path, unsafe=("os.system",), marker=marker("zip_spliced"),
                      good={"weight": weight.numpy(), "bias": bias.numpy()}, fmt="torch-zip"))
    plain.unlink()

    # TorchScript: a real traced module whose data.pkl gets the payload; the module still opens.
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 2)
    script = folder / "_script.pt"
    with warnings.catch_warnings():  # torch.jit is deprecated, TorchScript files still exist
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.trace(linear, torch.zeros(1, 4)), str(script))
    path = folder / "torchscript.pt"
    body = global_call("os", "system", (shell_touch(marker("torchscript")),))
    replace_member(script, path, "/data.pkl", lambda d: prepend_payload(d, body))
    script.unlink()
    cases.append(Case("torchscript", path, unsafe=("os.system",), marker=marker("torchscript"),
                      good={"weight": linear.weight.detach().numpy(), "bias": linear.bias.detach().numpy()},
                      fmt="torchscript"))

    # The legacy (pre-1.6) format with the payload beside a tensor.
    path = folder / "legacy.pth"
    torch.save({"weight": weight, "evil": Payload(_os.system, (shell_touch(marker("legacy")),))}, path,
               _use_new_zipfile_serialization=False)
    cases.append(Case("legacy", path, unsafe=("posix.system",), marker=marker("legacy"),
                      good={"weight": weight.numpy()}, fmt="torch-legacy"))

    # Two data.pkl records (the same name twice; or two roots): refused, never guessed.
    benign = torch_data_pkl({"x": 1})
    evil = prepend_payload(benign, global_call("os", "system", (shell_touch(marker("two_data_pkl")),)))
    path = folder / "two_data_pkl.pth"
    raw_zip(path, [("archive/data.pkl", benign), ("archive/data.pkl", evil), ("archive/version", b"3\n")])
    cases.append(Case("two_data_pkl", path, error=("ambiguous",), marker=marker("two_data_pkl")))
    path = folder / "two_roots.pth"
    evil = prepend_payload(benign, global_call("os", "system", (shell_touch(marker("two_roots")),)))
    raw_zip(path, [("a/data.pkl", benign), ("b/data.pkl", evil), ("a/version", b"3\n")])
    cases.append(Case("two_roots", path, error=("ambiguous",), marker=marker("two_roots")))

    # '../' and absolute names: never extracted, never looked up on disk. The storage key points
    # outside the archive: it is looked up among the members only, so the tensor is broken.
    escape = folder / "escape_target.txt"
    obj = {"good": _FakeTensor(_FakeStorage("0", 6), 0, (2, 3), (3, 1)),
           "outside": _FakeTensor(_FakeStorage(f"../../../../..{escape}", 6), 0, (2, 3), (3, 1))}
    escape.write_bytes(GOOD.tobytes())
    path = folder / "dotdot_names.pth"
    raw_zip(path, [("archive/data.pkl", torch_data_pkl(obj)), ("archive/data/0", GOOD.tobytes()),
                   ("../../dotdot_written.txt", b"x"), ("/tmp/ckptview_abs_written.txt", b"x"),
                   ("archive/version", b"3\n")])
    cases.append(Case("dotdot_names", path, broken=("outside",), good={"good": GOOD}))
    path = folder / "dotdot_root.pth"
    raw_zip(path, [("../data.pkl", torch_data_pkl({"good": obj["good"]})), ("../data/0", GOOD.tobytes()),
                   ("../version", b"3\n")])
    cases.append(Case("dotdot_root", path, good={"good": GOOD}))

    # Polyglot: a pickle followed by a zip. Like torch.load (which decides by the first bytes), the
    # leading pickle wins; the appended archive is reported, never read.
    zip_part = folder / "_poly_zip.pth"
    torch.save({"weight": weight}, zip_part)
    pickle_part = global_call("os", "system", (shell_touch(marker("polyglot")),)) + b"."
    path = folder / "polyglot.pth"
    path.write_bytes(pickle_part + zip_part.read_bytes())
    zip_part.unlink()
    cases.append(Case("polyglot", path, unsafe=("os.system",), marker=marker("polyglot"), fmt="pickle",
                      warning="after the pickle"))

    # NumPy object arrays pickled inside a checkpoint: the element's __reduce__ is the payload.
    path = folder / "numpy_object_array.pth"
    arr = np.empty(1, dtype=object)
    arr[0] = Payload(_os.system, (shell_touch(marker("numpy_object_array")),))
    torch.save({"weight": weight, "arr": arr}, path)
    reconstruct = "numpy._core.multiarray._reconstruct" if np.__version__ >= "2" else \
        "numpy.core.multiarray._reconstruct"
    cases.append(Case("numpy_object_array", path, unsafe=(reconstruct, "posix.system"),
                      marker=marker("numpy_object_array"), good={"weight": weight.numpy()}))
    return cases


# -- the malformed corpus ---------------------------------------------------------------------------

def make_malformed(folder: Path) -> list[Case]:
    """Broken files: each must give a one-line error naming the problem, or open with broken parts."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def add(name: str, data: bytes, **kw: Any) -> Case:
        path = folder / name
        path.write_bytes(data)
        case = Case(name, path, **kw)
        cases.append(case)
        return case

    add("empty.pth", b"", error=("empty",))
    rng = np.random.default_rng(10)
    add("random.pth", b"\x00" + rng.integers(0, 256, 4095, dtype=np.uint8).tobytes(), error=("not a checkpoint",))
    add("text.pth", b"Model weights are available on request.\n" * 20, error=("text",))
    add("page.pth", b"<!DOCTYPE html>\n<html><head><title>404</title></head><body>Not found</body></html>\n",
        error=("html",))
    add("image.pth", b"\x89PNG\r\n\x1a\n" + bytes(200), error=("png",))
    add("lfs_pointer.pth", b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32
        + b"\nsize 438012345\n", error=("lfs",))

    # Truncated torch zips, every 5% of the length: listed from the records before the cut (issue 45).
    ref = folder / "_ref.pth"
    torch.save(reference_state(), ref)
    whole = ref.read_bytes()
    for pct in range(5, 100, 5):
        add(f"zip_cut_{pct:02d}.pth", whole[: len(whole) * pct // 100], error=("incomplete download",),
            salvaged=True, warning="incomplete download")
    # Truncated legacy files: the header, the pickle or the storages are cut.
    legacy = folder / "_ref_legacy.pth"
    torch.save(reference_state(), legacy, _use_new_zipfile_serialization=False)
    lwhole = legacy.read_bytes()
    for pct in (3, 10, 30, 60, 90, 99):
        add(f"legacy_cut_{pct:02d}.pth", lwhole[: len(lwhole) * pct // 100], error=("truncated",),
            error_or_broken=True)
    legacy.unlink()

    members = zip_members(ref)
    ref.unlink()

    def rezip(name: str, transform: Any, **kw: Any) -> Case:
        path = folder / name
        raw_zip(path, [e for e in (transform(n, d) for n, d in members) if e is not None])
        case = Case(name, path, **kw)
        cases.append(case)
        return case

    # A corrupted byte in data.pkl without a matching CRC (the key 'fc.weight' becomes 'fc.wEight').
    crc_path = folder / "crc_data_pkl.pth"
    entries = []
    for n, d in members:
        entries.append((n, d))
    raw_zip(crc_path, entries)
    blob = bytearray(crc_path.read_bytes())
    at = blob.index(b"fc.weight")
    blob[at + 4] = ord("E")
    crc_path.write_bytes(bytes(blob))
    cases.append(Case("crc_data_pkl.pth", crc_path, error=("crc",)))
    rezip("no_data_pkl.pth", lambda n, d: None if n.endswith("data.pkl") else (n, d), error=("data.pkl",))
    rezip("data_pkl_garbage.pth", lambda n, d: (n, b"\x80\x02\xfe garbage" if n.endswith("data.pkl") else d),
          error=("invalid data.pkl",))
    rezip("data_pkl_cut.pth", lambda n, d: (n, d[: len(d) // 2] if n.endswith("data.pkl") else d),
          error=("truncated",))
    rezip("bad_byteorder.pth", lambda n, d: (n, b"middle" if n.endswith("/byteorder") else d), error=("byteorder",))

    # Plain pickles that are invalid, truncated or underflow the stack.
    add("invalid_pickle.pkl", b"\x80\x02\xfe\xfe\xfe.", error=("invalid pickle", "unknown opcode"))
    add("truncated_pickle.pkl", pickle.dumps({"a": list(range(100))}, protocol=2)[:-7], error=("truncated",))
    add("underflow_pickle.pkl", b"\x80\x02R.", error=("stack underflow",))
    add("no_mark_pickle.pkl", b"\x80\x02K\x01t.", error=("mark",))
    add("huge_length_pickle.pkl", b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"abc", error=("truncated",))
    add("bad_memo_pickle.pkl", b"\x80\x02h\x07.", error=("memo",))

    # Hand-made torch zips with impossible views beside one fine tensor: the fine one still reads.
    bad_views = {
        "missing_storage": _FakeTensor(_FakeStorage("1", 4), 0, (4,), (1,)),
        "negative_shape": _FakeTensor(_FakeStorage("1", 4), 0, (-1, 4), (4, 1)),
        "overflow_shape": _FakeTensor(_FakeStorage("1", 4), 0, (1 << 62, 1 << 62), (1 << 62, 1)),
        "huge_stride": _FakeTensor(_FakeStorage("1", 4), 0, (2, 2), (1 << 63, 1)),
        "negative_stride": _FakeTensor(_FakeStorage("1", 4), 0, (2, 2), (-2, 1)),
        "negative_offset": _FakeTensor(_FakeStorage("1", 4), -3, (2,), (1,)),
        "offset_beyond": _FakeTensor(_FakeStorage("1", 4), 1000, (2,), (1,)),
        "shape_beyond": _FakeTensor(_FakeStorage("1", 4), 0, (100,), (1,)),
        "elements_1e15": _FakeTensor(_FakeStorage("1", 10**15), 0, (10**15,), (1,)),
    }
    for name, bad in bad_views.items():
        obj, records = _with_good(bad)
        if name != "missing_storage":
            records["1"] = np.ones(4, dtype=np.float32).tobytes()
        path = folder / f"view_{name}.pth"
        crafted_zip(path, obj, records)
        cases.append(Case(path.name, path, broken=("bad",), good={"good": GOOD}))

    # Deep nesting: 100,000 nested lists (one leaf at the bottom; and a leaf at every level).
    n = 100_000
    add("deep_100k.pkl", b"\x80\x02" + b"]" * n + b"K\x01a" + b"a" * (n - 1) + b".", value="deeper than")
    add("deep_wide_100k.pkl", b"\x80\x02" + b"]" * n + (b"K\x01a" + b"a") * (n - 1) + b"K\x01a" + b".",
        value="deeper than")
    add("deep_tuple_key.pkl", b"\x80\x02}" + b"K\x01" + b"\x85" * n + b"K\x02s.")
    deep_json = b"{" + b'"a":{' * n + b"}" * (n + 1)
    add("deep_json.safetensors", struct.pack("<Q", len(deep_json)) + deep_json, error=("json",))

    # Pickle bombs: shared references that expand to 10^10 tree items ("billion laughs"), and one
    # memoized list copied again and again by an emulated call (`set(big)` 20,000 times).
    laughs: Any = [1] * 10
    for _ in range(9):
        laughs = [laughs] * 10
    add("laughs.pkl", pickle.dumps(laughs, protocol=4), error=("repeating shared",))
    add("copy_amplifier.pkl", b"\x80\x02c__builtin__\nset\nq\x00]q\x01(" + b"K\x00" * 200_000 + b"e0]q\x02("
        + b"h\x00h\x01\x85R" * 20_000 + b"e.", error=("elements copied by calls",))

    # Zip bombs: a 16-byte storage whose record inflates to 1 GiB; a data.pkl declaring 3 GiB.
    bomb, crc = zero_bomb(1 << 30)
    path = folder / "zip_bomb_storage.pth"
    crafted_zip(path, {"good": _FakeTensor(_FakeStorage("0", 4), 0, (4,), (1,))}, {"0": bomb},
                sizes={"0": (1 << 30, crc)})
    cases.append(Case(path.name, path, good={"good": np.zeros(4, dtype=np.float32)}))
    # A legitimately declared 1 GiB tensor in a compressed record: iterating it must stay bounded.
    path = folder / "zip_compressed_1gib.pth"
    crafted_zip(path, {"zeros": _FakeTensor(_FakeStorage("0", 1 << 28), 0, (1 << 28,), (1,))}, {"0": bomb},
                sizes={"0": (1 << 30, crc)})
    cases.append(Case(path.name, path))
    path = folder / "zip_bomb_data_pkl.pth"
    raw_zip(path, [("archive/data.pkl", bomb), ("archive/version", b"3\n")],
            sizes={"archive/data.pkl": (3 << 30, crc)})
    cases.append(Case(path.name, path, error=("allowed", "too large")))

    # safetensors headers that lie.
    def st(name: str, header: bytes, data: bytes = b"", length: int | None = None, **kw: Any) -> Case:
        return add(name, struct.pack("<Q", len(header) if length is None else length) + header + data, **kw)

    st("st_huge_header.safetensors", b'{"a":1}', length=1 << 62, error=("exceeds",))
    st("st_header_past_end.safetensors", b'{"a": {}}', length=5000, error=("truncated",))
    st("st_invalid_json.safetensors", b'{"a": [1, 2,', error=("json",))
    st("st_entry_not_object.safetensors", b'{"a": 1}', error=("not an object",))
    st("st_unknown_dtype.safetensors", b'{"a": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}}',
       b"\x00", error=("dtype",))
    four = np.arange(4, dtype=np.float32)
    header = (b'{"good": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},'
              b' "bad": {"dtype": "F32", "shape": [4], "data_offsets": [%d, %d]}}')
    st("st_out_of_range.safetensors", header % (16, 4000), four.tobytes() * 2, broken=("bad",),
       good={"good": four})
    st("st_negative_offsets.safetensors", header % (-16, 0), four.tobytes() * 2, broken=("bad",),
       good={"good": four})
    st("st_reversed_offsets.safetensors", header % (32, 16), four.tobytes() * 2, broken=("bad",),
       good={"good": four})
    st("st_overlap.safetensors", (b'{"good": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},'
                                  b' "also": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}'),
       four.tobytes(), error=("overlap",))  # refused, as the safetensors library refuses it
    st("st_elements_1e15.safetensors", (b'{"good": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},'
                                        b' "bad": {"dtype": "F32", "shape": [1000000000000000],'
                                        b' "data_offsets": [0, 16]}}'), four.tobytes(),
       broken=("bad",), good={"good": four})
    _malformed_gguf(folder, add, four)
    return cases


def _malformed_gguf(folder: Path, add: Any, four: np.ndarray) -> None:
    """GGUF headers that lie (issue 42): counts, lengths, dimensions, offsets and types no file could hold."""
    from tests.support.gguf_files import RawGguf, blocks_of, write_gguf

    def gg(name: str, raw: RawGguf, **kw: Any) -> Case:
        return add(name, raw.bytes(), **kw)

    def good() -> RawGguf:  # a fine F32 tensor `good` of four values at offset 0
        raw = RawGguf().add_u32("llama.block_count", 1).add_tensor("good", (4,), 0, 0)
        raw.data = four.tobytes() + bytes(28)
        return raw

    raw = good()
    raw.n_tensors = 1 << 62
    gg("gguf_tensor_count_4e18.gguf", raw, error=("tensors",))
    raw = good()
    raw.n_kv = 1 << 62
    gg("gguf_kv_count_4e18.gguf", raw, error=("metadata keys",))
    raw = good()
    raw.kv.append(raw.s(b"key", 1 << 60))
    gg("gguf_key_length_1e18.gguf", raw, error=("truncated",))
    gg("gguf_array_1e9.gguf", good().add_kv("big", 9, struct.pack("<IQ", 4, 10**9)), error=("1,000,000,000 items",))
    gg("gguf_string_array_1e9.gguf", good().add_kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 10**9)),
       error=("1,000,000,000 items",))
    depth = 100_000  # arrays nested 100,000 deep, 12 bytes a level: walked with a stack, shown summarized
    gg("gguf_nested_arrays_100k.gguf", good().add_kv("nested", 9, struct.pack("<IQ", 9, 1) * depth
                                                       + struct.pack("<IQ", 0, 0)),
       good={"good": four}, value="[1 x array: [1 x array]]")
    gg("gguf_unknown_value_type.gguf", good().add_kv("odd", 77, b"\0" * 8), error=("unknown value type",))
    gg("gguf_alignment_3.gguf", good().add_u32("general.alignment", 3), error=("power of two",))
    gg("gguf_version_1.gguf", RawGguf(version=1), error=("version 1",))
    gg("gguf_dimensions_1000.gguf", good().add_tensor("bad", (1,) * 1000, 0, 32), error=("dimensions",))
    gg("gguf_elements_int64.gguf", good().add_tensor("bad", (1 << 62, 8), 0, 32), error=("int64",))
    gg("gguf_duplicate_tensor.gguf", good().add_tensor("good", (4,), 0, 0), error=("twice",))
    gg("gguf_huge_dims.gguf", good().add_tensor("bad", (1 << 40, 1 << 20), 0, 32), broken=("bad",),
       good={"good": four})
    gg("gguf_offset_past_end.gguf", good().add_tensor("bad", (4,), 0, 1 << 40), broken=("bad",), good={"good": four})
    gg("gguf_overlap.gguf", good().add_tensor("also", (2,), 0, 8), error=("overlap",))
    gg("gguf_unknown_type.gguf", good().add_tensor("bad", (32,), 99, 32), broken=("bad",), good={"good": four})
    gg("gguf_partial_blocks.gguf", good().add_tensor("bad", (20,), 2, 32), broken=("bad",), good={"good": four})
    # A real file (gguf's writer) cut every 10%: a one-line error or its cut tensors broken.
    real = folder / "_gguf_ref.gguf"
    rng = np.random.default_rng(0)
    weights = {f"blk.{i}.ffn_up.weight": (blocks_of("Q4_0", rng.standard_normal((8, 64)).astype(np.float32), rng),
                                          "Q4_0") for i in range(4)}
    write_gguf(real, weights, "llama", {"tokenizer.ggml.tokens": [f"t{i}" for i in range(300)]})
    whole = real.read_bytes()
    real.unlink()
    for pct in range(10, 100, 10):
        add(f"gguf_cut_{pct:02d}.gguf", whole[: len(whole) * pct // 100], error=("truncated", "past the end", "left in the file"),
            error_or_broken=True)



_CACHE: dict[str, Any] = {}


def shared(kind: str, factory: Any) -> Any:
    """One corpus per test session (`kind` in hostile|malformed|reference), made in a pytest tmp folder."""
    if kind not in _CACHE:
        make = {"hostile": make_hostile, "malformed": make_malformed, "reference": make_reference}[kind]
        _CACHE[kind] = make(factory.mktemp(kind))
    return _CACHE[kind]

def main(argv: list[str]) -> int:
    """Write both corpora (and the fuzz seeds) below argv[0]."""
    out = Path(argv[0] if argv else "corpus")
    hostile, malformed = make_hostile(out / "hostile"), make_malformed(out / "malformed")
    make_reference(out / "reference")
    print(f"{len(hostile)} hostile and {len(malformed)} malformed files in {os.path.abspath(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
