"""Export to .npy / .npz / .safetensors compared with torch.load on the same file; hostile names; cancel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import ml_dtypes  # noqa: F401  (registers bfloat16/float8 with NumPy so np.load reads exact exports)
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as hs

from ckptview.cli import main
from ckptview.commands.wording import cli_words
from ckptview.core import open_checkpoint
from ckptview.core.errors import Cancelled
from ckptview.core.export.plan import (
    MANIFEST,
    ExportError,
    ExportExistsError,
    entries_below,
    export_tensors,
    plan_export,
    select_tensors,
)
from ckptview.core.export.safe_names import Deduplicator, is_safe_member, safe_file_stem
from ckptview.core.jobs import CancelToken
from ckptview.core.message import Fix, Hint, hints_of

ML_DTYPES = {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
             torch.float8_e5m2fnuz, torch.float8_e8m0fnu}
PLAIN = [torch.float32, torch.float64, torch.float16, torch.complex64, torch.complex128, torch.bool,
         torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32,
         torch.uint64]


def _sample(dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(3, 5, generator=gen) * 4
    if dtype.is_complex:
        return torch.complex(x, -x).to(dtype)
    if dtype == torch.bool:
        return x > 0
    if not dtype.is_floating_point:
        return (x * 10).to(torch.int64).abs().to(dtype)
    return x.to(dtype)


@pytest.fixture(autouse=True)
def _every_chunk_reports(monkeypatch):
    """Progress comes at most every 50 ms (issue 24); here a clock a second ahead per reading makes every
    chunk report, so the tests can step an export chunk by chunk."""
    import itertools

    from ckptview.core.export import plan as export_mod

    monkeypatch.setattr(export_mod, "_clock", itertools.count().__next__)


def _run(job):
    """Drive an export generator to the end; return (progress list, result)."""
    seen = []
    while True:
        try:
            seen.append(next(job))
        except StopIteration as stop:
            return seen, stop.value


def _tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files}


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory):
    """A state dict with every dtype, views (transposed, sliced, shared storages) and a quantized tensor."""
    gen = torch.Generator().manual_seed(0)
    sd = {f"d.{str(d).removeprefix('torch.')}": _sample(d, gen) for d in [*PLAIN, *ML_DTYPES]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex32 and quantized tensors warn that they are experimental
        sd["d.complex32"] = _sample(torch.complex64, gen).to(torch.complex32)
        sd["q.weight"] = torch.quantize_per_tensor(torch.randn(6, generator=gen), 0.1, 3, torch.qint8)
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    sd["views.base"] = base
    sd["views.transposed"] = base.t()
    sd["views.sliced"] = base[1:5, ::3]
    sd["views.bf16_t"] = base.to(torch.bfloat16).t()
    sd["views.e5m2_t"] = base.to(torch.float8_e5m2).t()
    sd["views.scalar"] = torch.tensor(7.5)
    sd["views.empty"] = torch.zeros(0, 3)
    path = tmp_path_factory.mktemp("ckpt") / "every.pt"
    torch.save(sd, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = torch.load(path, weights_only=True)
    return path, ref


def _expected(t: torch.Tensor, exact: bool) -> np.ndarray:
    """What an export should hold for `t`: torch's own reading, upcast/int-repr where documented."""
    if t.is_quantized:
        return t.int_repr().numpy()
    if t.dtype == torch.complex32:
        return t.to(torch.complex64).numpy()
    if t.dtype in ML_DTYPES:
        if not exact:
            return t.float().numpy()
        np_type = getattr(ml_dtypes, str(t.dtype).removeprefix("torch."))
        bits = torch.int16 if t.dtype == torch.bfloat16 else torch.uint8
        return t.contiguous().view(bits).numpy().view(np_type)
    return t.numpy()


def _assert_same(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert got.dtype == want.dtype, name
    assert got.shape == want.shape, name
    assert got.tobytes() == np.ascontiguousarray(want).tobytes(), name  # bit-exact, NaN included


def test_npy_folder_every_dtype_default_upcast(every_dtype, tmp_path):
    path, ref = every_dtype
    ckpt = open_checkpoint(path)
    out = tmp_path / "out"
    _, result = _run(export_tensors(select_tensors(ckpt), out))
    assert result.format == "npy" and set(result.files) == set(ref)
    for name, tensor in ref.items():
        _assert_same(np.load(result.files[name]), _expected(tensor, exact=False), name)
    manifest = json.loads((out / MANIFEST).read_text())
    assert {t["name"]: t["file"] for t in manifest["tensors"]} == {
        n: os.path.basename(f) for n, f in result.files.items()}
    assert any("bfloat16 converted to float32" in n for n in result.notes)
    assert any("q.weight" in n and "stored integers" in n for n in result.notes)
    assert not [f for f in os.listdir(out) if f.endswith(".part")]


def test_npz_exact_dtypes_keys_are_names(every_dtype, tmp_path):
    path, ref = every_dtype
    out = tmp_path / "all.npz"
    _, result = _run(export_tensors(select_tensors(open_checkpoint(path)), out, exact_dtypes=True))
    with np.load(out) as npz:
        assert sorted(npz.files) == sorted(ref)
        for name, tensor in ref.items():
            _assert_same(npz[name], _expected(tensor, exact=True), name)
    assert npz_bf16_descr(out) == "bfloat16"
    assert any("import ml_dtypes" in n for n in result.notes)


def npz_bf16_descr(path) -> str:
    import zipfile

    with zipfile.ZipFile(path) as zf, zf.open("d.bfloat16.npy") as fh:
        np.lib.format.read_magic(fh)
        header = fh.read(int.from_bytes(fh.read(2), "little"))
    return eval(header.decode("latin1"), {})["descr"]  # a Python literal we wrote ourselves


def test_exact_npy_needs_ml_dtypes_to_load(every_dtype, tmp_path):
    """Without `import ml_dtypes` np.load refuses the exact file loudly instead of returning raw bytes."""
    path, ref = every_dtype
    entries = select_tensors(open_checkpoint(path), ["d.bfloat16"])
    out = tmp_path / "bf.npy"
    _run(export_tensors(entries, out, exact_dtypes=True))
    code = (f"import numpy as np\ntry:\n np.load({str(out)!r}); print('loaded')\nexcept ValueError as e: print(e)\n"
            f"import ml_dtypes; print(np.load({str(out)!r}).dtype)")
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert "bfloat16" in lines[0] and "loaded" not in lines[0]
    assert lines[1] == "bfloat16"


def test_safetensors_bit_exact_dtypes_preserved(every_dtype, tmp_path):
    from safetensors.torch import load_file

    path, ref = every_dtype
    ckpt = open_checkpoint(path)
    entries = [e for e in select_tensors(ckpt) if e.name != "d.complex128"]
    out = tmp_path / "model.safetensors"
    _run(export_tensors(entries, out))
    loaded = load_file(out)
    assert set(loaded) == {e.name for e in entries}
    for name, got in loaded.items():
        want = ref[name]
        if want.is_quantized:
            want = want.int_repr()
        elif want.dtype == torch.complex32:
            want = want.to(torch.complex64)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert got.reshape(-1).view(torch.uint8).equal(want.reshape(-1).view(torch.uint8)), name
    header_len = int.from_bytes(out.read_bytes()[:8], "little")
    assert header_len % 8 == 0
    assert ckpt.sharing()["views.transposed"]  # the views really share one storage in the file


def test_safetensors_refuses_complex128(every_dtype, tmp_path):
    path, _ = every_dtype
    with pytest.raises(ExportError, match="no complex128"):
        plan_export(select_tensors(open_checkpoint(path)), tmp_path / "x.safetensors")
    assert list(tmp_path.iterdir()) == []


HOSTILE = ["../../x", "/etc/passwd", "a\x00b", "n" * 300, "n" * 300 + "z", "W", "w", "a/b", "a_b", "..",
           ".", "", "manifest.json", "CON", "__metadata__", "C:\\evil", "ok"]


@pytest.fixture()
def hostile(tmp_path):
    sd = {name: torch.full((2,), float(i)) for i, name in enumerate(HOSTILE)}
    sd["d"] = {"": torch.ones(1), "..": {"..": torch.zeros(1)}}  # nested: joined names like "d.." and "d...."
    path = tmp_path / "src" / "hostile.pt"
    path.parent.mkdir()
    torch.save(sd, path)
    return path, torch.load(path, weights_only=True)


@pytest.mark.parametrize("fmt,out_name", [("npy", "out"), ("npz", "out/h.npz"), ("safetensors", "out/h.safetensors")])
def test_hostile_names_stay_inside_and_never_collide(hostile, tmp_path, fmt, out_name):
    path, _ = hostile
    ckpt = open_checkpoint(path)
    entries = select_tensors(ckpt)
    names = [e.name for e in entries]
    before = _tree(tmp_path)
    _, result = _run(export_tensors(entries, tmp_path / out_name, fmt))
    created = _tree(tmp_path) - before
    assert created and all(p.startswith("out" + os.sep) for p in created), created
    assert all("\x00" not in p and ".." not in p.split(os.sep) for p in created)
    assert len(set(result.files.values())) == len(names)  # every tensor has its own file/key
    want = {e.name: _expected_values(e) for e in entries}
    if fmt == "npy":
        files = [os.path.basename(f) for f in result.files.values()]
        assert len({f.casefold() for f in files}) == len(files)  # also distinct where case is ignored
        assert all(len(f.encode()) <= 255 and not f.startswith(".") for f in files)
        assert len(created) == len(names) + 1  # one file per tensor plus the manifest
        for name, file in result.files.items():
            np.testing.assert_array_equal(np.load(file), want[name])
    elif fmt == "npz":
        with np.load(result.out) as npz:
            assert len(npz.files) == len(names)
            assert "ok" in npz.files and "a/b" in npz.files and "W" in npz.files and "w" in npz.files
            assert result.files["a_b"] == "a_b"  # plain names keep their key; rewritten ones give way
            for name, key in result.files.items():
                np.testing.assert_array_equal(npz[key], want[name])
    else:
        from safetensors.torch import load_file

        loaded = load_file(result.out)
        assert len(loaded) == len(names)
        for name, key in result.files.items():
            assert key == name or name == "__metadata__"
            np.testing.assert_array_equal(loaded[key].numpy(), want[name])


def test_cli_escapes_hostile_names(hostile, tmp_path, capsys):
    path, _ = hostile
    assert main(["export", str(path), "--out", str(tmp_path / "h.npz")]) == 0
    captured = capsys.readouterr()
    assert "a\\x00b -> a_b~2" in captured.out
    assert not any(c in captured.out + captured.err for c in "\x00\x1b")


def _expected_values(entry) -> np.ndarray:
    from ckptview.core.read.values.reading import read_values

    return np.array(read_values(entry.info))


def test_existing_files_need_force(every_dtype, tmp_path):
    path, ref = every_dtype
    entries = select_tensors(open_checkpoint(path), ["views.*"])
    out = tmp_path / "v.npz"
    out.write_bytes(b"precious")
    with pytest.raises(ExportExistsError, match="exists") as exists:
        _run(export_tensors(entries, out))
    assert hints_of(exists.value) == (Hint(Fix.FORCE),) and "use --force" in cli_words(exists.value)
    assert out.read_bytes() == b"precious" and sorted(os.listdir(tmp_path)) == ["v.npz"]
    _run(export_tensors(entries, out, force=True))
    with np.load(out) as npz:
        _assert_same(npz["views.sliced"], ref["views.sliced"].numpy(), "views.sliced")


@pytest.mark.parametrize("fmt,out_name", [("npy", "out"), ("npz", "out.npz"), ("safetensors", "out.safetensors")])
@pytest.mark.parametrize("how", ["token", "close"])
def test_cancel_midway_leaves_no_final_file(tmp_path, fmt, out_name, how):
    src = tmp_path / "big.pt"
    torch.save({"a": torch.arange(200_000, dtype=torch.float32), "b": torch.ones(200_000)}, src)
    entries = select_tensors(open_checkpoint(src))
    before = _tree(tmp_path)
    token = CancelToken()
    job = export_tensors(entries, tmp_path / out_name, fmt, token=token, chunk_elems=10_000)
    for _ in range(25):  # into the second tensor: the first one is complete on disk as a temp file
        next(job)
    if how == "token":
        token.cancel()
        with pytest.raises(Cancelled):
            next(job)
    else:
        job.close()  # what the GUI worker does when it is told to quit
    assert _tree(tmp_path) == before  # no final-named file, no temp file, no folder left behind
    assert not (tmp_path / out_name).exists()


def test_streams_one_chunk_at_a_time(tmp_path):
    src = tmp_path / "s.pt"
    torch.save({"w": torch.randn(1000, 10).t()}, src)  # non-contiguous, streamed through nditer
    progress, result = _run(export_tensors(select_tensors(open_checkpoint(src)), tmp_path / "o", chunk_elems=1000))
    writing = [p for p in progress if p.message.startswith("writing")]
    assert len(writing) == 10 and progress[-1].done == progress[-1].total == 40_000
    np.testing.assert_array_equal(np.load(result.files["w"]), torch.load(src)["w"].numpy())


def test_select_and_entries_below(every_dtype):
    path, _ = every_dtype
    ckpt = open_checkpoint(path)
    assert [e.name for e in select_tensors(ckpt, ["views.s*"])] == ["views.sliced", "views.scalar"]
    assert [e.name for e in select_tensors(ckpt, ["d.int8", "d.uint8"])] == ["d.int8", "d.uint8"]
    with pytest.raises(ExportError, match="no tensor matches 'nope'") as none:
        select_tensors(ckpt, ["nope"])
    assert "--" not in str(none.value) and "`ckptview info`" in cli_words(none.value)
    views = next(n for n in ckpt.root.walk() if n.key == "views.base")
    # A tensor picked twice (itself and through the root) is exported once, in file order.
    picked = entries_below(ckpt, [views, ckpt.root])
    assert [e.name for e in picked] == [e.name for e in ckpt.tensors()]


def test_single_npy_needs_one_tensor(every_dtype, tmp_path):
    path, _ = every_dtype
    with pytest.raises(ExportError, match="holds one tensor"):
        plan_export(select_tensors(open_checkpoint(path), ["views.*"]), tmp_path / "x.npy")


def test_cli_export_prints_mapping_and_errors_in_one_line(every_dtype, tmp_path, capsys):
    path, ref = every_dtype
    out = tmp_path / "cli"
    assert main(["export", str(path), "--out", str(out), "--key", "views.*", "--key", "d.bfloat16"]) == 0
    captured = capsys.readouterr()
    assert "wrote 8 tensors" in captured.out and "views.transposed -> views.transposed.npy" in captured.out
    assert "bfloat16 converted to float32" in captured.err
    np.testing.assert_array_equal(np.load(out / "views.transposed.npy"), ref["views.transposed"].numpy())
    assert main(["export", str(path), "--out", str(out), "--key", "views.*"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err and "--force" in err
    assert main(["export", str(path), "--out", str(out), "--key", "views.*", "--force"]) == 0
    assert main(["export", str(path), "--out", str(tmp_path / "e.npz"), "--key", "d.bfloat16",
                 "--exact-dtypes"]) == 0
    with np.load(tmp_path / "e.npz") as npz:
        assert npz["d.bfloat16"].dtype == ml_dtypes.bfloat16


@pytest.mark.slow
@given(hs.text(max_size=400))
def test_safe_file_stem_is_a_plain_file_name(name):
    stem = safe_file_stem(name)
    assert stem and len(stem) <= 120 and not stem.startswith(".")
    assert "/" not in stem and "\\" not in stem and "\x00" not in stem
    assert os.path.basename(stem) == stem and stem not in (".", "..")


def test_deduplicator_and_members():
    files = Deduplicator(casefold=True, reserved=("manifest.json",))
    assert [files.take(s, ".npy") for s in ["W", "w", "w~2", "w"]] == ["W.npy", "w~2.npy", "w~2~2.npy", "w~3.npy"]
    assert files.take("manifest", ".json") == "manifest~2.json"
    assert is_safe_member("a/b.c") and not any(map(is_safe_member, ["../x", "/x", "a\x00", "a\\b", "C:x", "a//b", ""]))


def test_meta_tensors_are_skipped_with_a_note(tmp_path):
    src = tmp_path / "meta.pt"
    torch.save({"real": torch.ones(3), "ghost": torch.empty(4, device="meta")}, src)
    _, result = _run(export_tensors(select_tensors(open_checkpoint(src)), tmp_path / "o.npz"))
    assert list(result.files) == ["real"] and any(n.startswith("skipped ghost") for n in result.notes)
    with pytest.raises(ExportError, match="nothing to export"):
        plan_export(select_tensors(open_checkpoint(src), ["ghost"]), tmp_path / "g.npz")


def test_safetensors_input_round_trips(tmp_path):
    from safetensors.torch import load_file, save_file

    src = tmp_path / "in.safetensors"
    save_file({"a.w": torch.randn(4, 3).to(torch.bfloat16), "a.b": torch.arange(5)}, src)
    _, result = _run(export_tensors(select_tensors(open_checkpoint(src)), tmp_path / "out.safetensors"))
    got, want = load_file(result.out), load_file(src)
    assert got.keys() == want.keys() and all(got[k].equal(want[k]) and got[k].dtype == want[k].dtype for k in want)


# -- signals, free space, expanded tensors (issue 14) -------------------------------------------------

SLOW_EXPORT = r"""
import os, sys, time
import ckptview.core.export.plan as ex
from ckptview import cli

path, out, marker = sys.argv[1:4]
real = ex.iter_chunks
calls = []

def slow(info, chunk_elems, **kwargs):
    calls.append(info)
    for chunk in real(info, chunk_elems, **kwargs):
        yield chunk
        if len(calls) == 2:  # one tensor written, a .part file open: tell the parent, wait for its signal
            open(marker, "w").close()
            for _ in range(6000):  # short sleeps: a signal taken by another thread (numpy's) still
                time.sleep(0.1)  # reaches the main thread's handler within 0.1 s

ex.iter_chunks = slow
if len(sys.argv) > 4:  # a signal Python ignores at start (SIGPIPE, SIGXFSZ), set back to its default by a parent
    import signal
    signal.signal(getattr(signal, sys.argv[4]), signal.SIG_DFL)
sys.exit(cli.main(["export", path, "--out", out]))
"""

# Every catchable signal whose default ends the process: a batch scheduler's warning (SIGUSR1, SIGUSR2,
# SIGXCPU), `timeout -s ALRM`, profiling timers, Ctrl-\, and SIGPIPE/SIGXFSZ where a parent restored them.
_OTHER_TERMINATING = ["SIGUSR2", "SIGXCPU", "SIGVTALRM", "SIGPROF", "SIGQUIT", "SIGPIPE", "SIGXFSZ", "SIGRTMIN"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT", "SIGUSR1", "SIGALRM"])
@pytest.mark.parametrize("out_name", ["out", "out.npz", "out.safetensors"])
def test_signal_during_export_removes_part_files(tmp_path, signame, out_name):
    _signal_during_export(tmp_path, signame, out_name)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signame", _OTHER_TERMINATING)
def test_every_terminating_signal_removes_part_files(tmp_path, signame):
    _signal_during_export(tmp_path, signame, "out.npz")


def _signal_during_export(tmp_path, signame, out_name):
    import signal

    from tests.support.export_signals import signal_while_writing

    src = tmp_path / "src" / "big.pt"
    src.parent.mkdir()
    torch.save({"a": torch.arange(300_000, dtype=torch.float32), "b": torch.ones(300_000)}, src)
    work = tmp_path / "work"
    work.mkdir()
    sig = getattr(signal, signame)

    def part_file_open() -> None:  # a .part file, or a new folder's staging folder (its files under their names)
        assert any(name.endswith(".part") or name.startswith(".ckptview-export-")
                   for _, dirs, files in os.walk(work) for name in files + dirs)

    restored = [signame] if signame in ("SIGPIPE", "SIGXFSZ") else []
    returncode, err = signal_while_writing(SLOW_EXPORT, src, work / out_name, tmp_path / "marker", sig,
                                           part_file_open, *restored)
    assert returncode == (130 if signame == "SIGINT" else 128 + sig), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert signame in lines[0] or "interrupted" in lines[0]
    left = [os.path.join(d, n) for d, _, files in os.walk(work) for n in files]
    assert left == []  # no .part, no final file
    assert os.listdir(work) == []  # nor the folder an npy export created


def test_export_refuses_up_front_when_space_is_short(tmp_path, monkeypatch, capsys):
    import shutil
    from collections import namedtuple

    src = tmp_path / "m.pt"
    torch.save({"w": torch.zeros(1000, 250)}, src)  # 1,000,000 bytes of float32
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**7, 10**7 - 999_999, 999_999))
    with pytest.raises(ExportError, match=r"writes .*1,000,000 bytes.*999,999 bytes\) free"):
        _run(export_tensors(select_tensors(open_checkpoint(src)), tmp_path / "o.npz"))
    assert main(["export", str(src), "--out", str(tmp_path / "out") + "/"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not enough space" in err and "1,000,000 bytes" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "o.npz").exists()
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**7, 0, 10**7))
    _, result = _run(export_tensors(select_tensors(open_checkpoint(src)), tmp_path / "o.npz"))
    assert result.bytes_written == 1_000_000


def test_expanded_tensor_exports_exactly_or_is_refused_up_front(tmp_path, capsys):
    """A view that repeats its storage is refused up front unless the expansion is asked for (issue 34):
    then it is written exactly, every element it declares."""
    src = tmp_path / "e.pt"
    small = torch.arange(12.0).reshape(3, 1, 4).expand(3, 5, 4)
    huge = torch.arange(1000.0).expand(10**9, 1000)  # 1e12 elements over 1000 stored
    torch.save({"small": small, "huge": huge}, src)
    ckpt = open_checkpoint(src)
    with pytest.raises(ExportError, match="small.*declares 60 elements ") as repeated:
        plan_export(select_tensors(ckpt, ["small"]), tmp_path / "s.npz")
    assert hints_of(repeated.value) == (Hint(Fix.EXPAND_REPEATS), Hint(Fix.LEAVE_OUT))
    assert "--expand-repeats" in cli_words(repeated.value) and "--" not in str(repeated.value)
    _, result = _run(export_tensors(select_tensors(ckpt, ["small"]), tmp_path / "s.npz", expand_repeats=True))
    with np.load(result.out) as npz:
        np.testing.assert_array_equal(npz["small"], torch.load(src)["small"].numpy())
    with pytest.raises(ExportError, match="huge.*declares 1,000,000,000,000 elements"):
        plan_export(select_tensors(ckpt, ["huge"]), tmp_path / "h.npz")
    assert main(["export", str(src), "--out", str(tmp_path / "h.npz")]) == 2
    assert "--expand-repeats" in capsys.readouterr().err and not (tmp_path / "h.npz").exists()


def test_write_error_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    import errno

    src = tmp_path / "src.pt"
    torch.save({"w": torch.ones(100)}, src)
    out = tmp_path / "out"
    out.mkdir()

    def full(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert main(["export", str(src), "--out", str(out / "w.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "w.npz" in err
    assert os.listdir(out) == []
