"""Work sized by the bytes a file stores, never by the shape a view declares (issue 34, findings 1 and 2).

1. A 1.5 KB file holding a stride-0 view (2 x 250,000,000 over one 4-byte element) made `info --spectral`
   allocate a 3.7 GiB float64 copy; eight stride-0 4096 x 4096 views kept the CPU busy for minutes (an
   eigendecomposition each). The same code served `series --spectral` and the window's Spectrum panel.
2. Four stride-0 views in a 2,333-byte file exported to 144 MB of `.npy` (61,724x).

One rule now holds for every reader (`core/read/values/repeats.py`): a view that repeats its storage (stride 0,
overlapping strides) is marked in `info` and the window; statistics, histograms and heat-maps read what it
stores; spectra, exports and element-by-element comparisons that would read more are refused in one line
(its expanded size first) unless the user asks for the expanded tensor. Each bound is held here by memory
(tracemalloc, which sees NumPy's buffers) and CPU time of this process, never by a clock on the wall; the
files are small versions of the attack (a few MB declared per KB stored), which the code before this
change read whole.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
import tracemalloc

import numpy as np
import pytest
import torch

from ckptview.cli import main
from ckptview.core.message import Fix, Hint, hints_of
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.repeats import BOTH, OVERLAPPING, STRIDE_0, RepeatedStorage, repeats

MEMORY = 12 << 20  # bytes any one analysis of the hostile file may allocate at its peak (tracemalloc)
CPU_SECONDS = 20.0  # CPU time (this process, all threads) any one command may take on it; before: minutes


def _hostile_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "plain": torch.randn(16, 8, generator=gen),
        "s0": torch.ones(1).expand(2, 4_000_000),  # 8,000,000 elements over 1 stored (the finding, scaled)
        # eight stride-0 square matrices: an eigendecomposition each, before
        **{f"rows{i}": torch.randn(1536, generator=gen).expand(1536, 1536) for i in range(8)},
        "win": torch.randn(4096, generator=gen).as_strided((2048, 2048), (1, 1)),  # overlapping windows
    }


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("repeats")
    path = folder / "hostile.pt"
    torch.save(_hostile_tensors(), path)
    assert path.stat().st_size < 200_000  # ~100 KB stored, ~120 MB declared
    # The libraries the analyses import on first use (the power-law fit's, the diff's) are imported once
    # here, on a plain file: their import is not what the bounds measure.
    plain = folder / "plain.pt"
    torch.save({"w": torch.randn(16, 8)}, plain)
    with contextlib.redirect_stdout(io.StringIO()):
        for argv in (["info", str(plain), "--spectral", "--stats"], ["diff", str(plain), str(plain)]):
            main(argv)
    return str(path)


class Bound:
    """Peak traced memory and CPU time of what runs inside the block (all threads of this process)."""

    def __enter__(self) -> Bound:
        tracemalloc.start()
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = time.process_time() - self.cpu
        self.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()

    def check(self, what: str) -> None:
        assert self.peak < MEMORY, f"{what}: {self.peak / 2**20:.1f} MiB at its peak"
        assert self.cpu < CPU_SECONDS, f"{what}: {self.cpu:.1f} s of CPU"


# -- the one mechanism --------------------------------------------------------------------------------


def test_repeats_tells_each_kind_of_view_from_its_strides_alone(tmp_path) -> None:
    base = torch.arange(64.0)
    views = {
        "contiguous": base.reshape(8, 8), "transposed": base.reshape(8, 8).t(), "stepped": base[::3],
        "interleaved": base.as_strided((3, 2), (2, 3)),  # fails the usual order test, yet repeats nothing
        "expand_size_1": base[:8].reshape(1, 8).expand(1, 8),  # stride 0 on a dimension of size 1: plain
        "s0": base[:8].expand(5, 8), "scalar_s0": base[0].expand(4, 4),
        "win": base.as_strided((40, 20), (1, 1)), "gapped": base.as_strided((10, 3), (2, 2)),
        "both": base.as_strided((3, 10, 10), (0, 1, 1)),
    }
    path = tmp_path / "v.pt"
    torch.save(views, path)
    ckpt = open_checkpoint(str(path))
    found = {name: repeats(ckpt.tensor(name)) for name in views}
    assert [n for n, r in found.items() if r is None] == ["contiguous", "transposed", "stepped", "interleaved",
                                                          "expand_size_1"]
    assert found["s0"].kind == STRIDE_0 and (found["s0"].elements, found["s0"].stored) == (40, 8)
    assert found["scalar_s0"].stored == 1 and found["scalar_s0"].exact
    assert found["win"].kind == OVERLAPPING and found["win"].stored == 59 and not found["win"].exact
    assert found["gapped"].stored == 12  # every other element of 0..22: the strides' common step
    assert found["both"].kind == BOTH and found["both"].stored == 19
    for name, r in found.items():
        if r is None:
            continue
        assert repeats(r.part) is None  # the stored part is a plain view: reading it costs what it holds
        loaded = torch.load(path, weights_only=True)[name]
        stored = set(np.asarray(loaded.reshape(-1)).tolist())
        from ckptview.core.read.values.reading import iter_chunks

        part = np.concatenate(list(iter_chunks(r.part)))
        assert stored <= set(part.tolist()) and part.size == r.stored  # every value the view shows is read


def test_every_reader_of_every_element_refuses_unless_asked(hostile) -> None:
    from ckptview.core.read.values.reading import iter_chunks, read_values

    info = open_checkpoint(hostile).tensor("s0")
    with Bound() as bound:
        for read in (lambda: next(iter_chunks(info)), lambda: read_values(info)):
            with pytest.raises(RepeatedStorage, match=r"declares 8,000,000 elements \(30\.5 MiB as float32\) over 1"):
                read()
    bound.check("refusals")
    assert next(iter_chunks(info, 1 << 10, expand=True)).tolist() == [1.0] * 1024  # asked: every element


# -- info ---------------------------------------------------------------------------------------------


def test_info_marks_what_repeats_in_text_and_json(hostile, capsys) -> None:
    assert main(["info", hostile, "--json"]) == 0
    rows = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tensors"]}
    assert "repeats" not in rows["plain"]
    assert rows["s0"]["repeats"] == {"kind": "stride 0", "elements": 8_000_000, "stored": 1,
                                     "factor": 8_000_000.0, "exact": True}
    assert rows["win"]["repeats"]["kind"] == "overlapping strides" and rows["win"]["repeats"]["stored"] == 4095
    assert main(["info", hostile]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.startswith("s0 "))
    assert "REPEATS its storage 8,000,000x (stride 0): 1 stored element" in line


def test_info_spectral_is_bounded_and_says_why_in_one_line(hostile, capsys) -> None:
    with Bound() as bound:
        assert main(["info", hostile, "--spectral", "--json"]) == 0
    bound.check("info --spectral")
    data = json.loads(capsys.readouterr().out)
    rows = {t["name"]: t for t in data["tensors"]}
    assert "spectral" in rows["plain"]
    refused = [w for w in data["warnings"] if "no spectrum" in w]
    assert len(refused) == 10 and all("\n" not in w and "--expand-repeats" in w for w in refused)
    assert not any("spectral" in rows[n] for n in rows if n != "plain")
    assert "declares 8,000,000 elements (30.5 MiB as float32) over 1 stored" in next(w for w in refused if "'s0'" in w)


def test_info_spectral_expand_repeats_computes_the_expanded_tensor(tmp_path, capsys) -> None:
    """Asked for explicitly, the spectrum is the expanded tensor's (numpy's SVD of the same values)."""
    gen = torch.Generator().manual_seed(1)
    tensors = {"r": torch.randn(12, generator=gen).expand(30, 12),
               "w": torch.randn(60, generator=gen).as_strided((20, 20), (2, 1))}
    path = tmp_path / "small.pt"
    torch.save(tensors, path)
    assert main(["info", str(path), "--spectral", "--expand-repeats", "--json"]) == 0
    rows = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tensors"]}
    for name, t in tensors.items():
        want = np.linalg.svd(t.contiguous().double().numpy(), compute_uv=False)
        assert rows[name]["spectral"]["spectral_norm"] == pytest.approx(want[0], rel=1e-9)


# -- series, the window's Spectrum panel ------------------------------------------------------------


def test_series_spectral_is_bounded(hostile, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    second = tmp_path / "step_2.pt"
    torch.save(_hostile_tensors(seed=1), second)
    with Bound() as bound:
        assert main(["series", hostile, str(second), "--spectral", "--json", "--workers", "1", "--no-cache"]) == 0
    bound.check("series --spectral")
    data = json.loads(capsys.readouterr().out)
    by_name = {t["name"]: t for t in data["tensors"]}
    assert by_name["s0"]["mean"] == [1.0, 1.0]  # exact figures, of what it stores counted as often as it repeats
    assert by_name["s0"]["norm"] == [pytest.approx(math.sqrt(8_000_000), rel=1e-12)] * 2
    assert by_name["plain"]["alpha"][0] is not None and by_name["rows0"]["alpha"] == [None, None]


@pytest.mark.gui
def test_the_spectrum_panel_is_bounded_and_expands_only_when_asked(hostile, qtbot, tmp_path) -> None:
    from ckptview.core.figures.analysis import Analysis
    from ckptview.gui.panels.spectrum import SpectrumPanel

    panel = SpectrumPanel()
    qtbot.addWidget(panel)
    ckpt = open_checkpoint(hostile)
    weights = [(name, ckpt.tensor(name)) for name in ("plain", "s0", "rows0", "rows1", "win")]
    with Bound() as bound, qtbot.waitSignal(panel.tableReady, timeout=120_000):
        panel.set_weights(weights)
    bound.check("Spectrum panel")
    assert sorted(panel.errors) == [1, 2, 3, 4] and 0 in panel.spectra
    assert all("declares" in panel.errors[i] for i in panel.errors)
    assert not panel.expand_box.isHidden() and "5," not in panel.expand_box.text()
    assert panel.expand_box.text().startswith("Compute 4 weight(s) that repeat their storage on every element: "
                                              f"{8_000_000 + 2 * 1536 ** 2 + 2048 ** 2:,} elements")
    # Asked for, a small one is computed on every element it declares.
    small = torch.randn(40, generator=torch.Generator().manual_seed(2)).expand(50, 40)
    path = tmp_path / "small.pt"
    torch.save({"small": small}, path)
    info = open_checkpoint(str(path)).tensor("small")
    panel.analysis = Analysis()
    with qtbot.waitSignal(panel.tableReady, timeout=120_000):
        panel.set_weights([("small", info)])
    assert panel.errors and not panel.spectra
    with qtbot.waitSignal(panel.tableReady, timeout=120_000):
        panel.expand_box.setChecked(True)
    want = np.linalg.svd(small.contiguous().double().numpy(), compute_uv=False)
    assert panel.spectra[0].spectral_norm == pytest.approx(want[0], rel=1e-9)


# -- export -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["npy", "npz", "safetensors"])
def test_export_refuses_in_one_line_and_writes_nothing(hostile, tmp_path, capsys, fmt) -> None:
    out = tmp_path / ("out" if fmt == "npy" else f"out.{fmt}")
    with Bound() as bound:
        status = main(["export", hostile, "--out", str(out), "--format", fmt])
    bound.check(f"export {fmt}")
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert "declares 8,000,000 elements (30.5 MiB as float32) over 1 stored" in err and "--expand-repeats" in err
    assert not out.exists() and not any(p.name.startswith(".ckptview-export") for p in tmp_path.iterdir())
    assert main(["export", hostile, "--out", str(tmp_path / f"plain.{fmt if fmt != 'npy' else 'npy'}"),
                 "--format", fmt, "--key", "plain"]) == 0  # the rest of the file still exports


@pytest.mark.parametrize("fmt", ["npy", "npz", "safetensors"])
def test_export_expand_repeats_writes_the_expanded_tensor(tmp_path, capsys, fmt) -> None:
    gen = torch.Generator().manual_seed(3)
    tensors = {"e": torch.randn(3, 1, 4, generator=gen).expand(3, 50, 4),
               "w": torch.randn(30, generator=gen).as_strided((10, 10), (2, 1))}
    src = tmp_path / "small.pt"
    torch.save(tensors, src)
    out = tmp_path / ("out" if fmt == "npy" else f"out.{fmt}")
    assert main(["export", str(src), "--out", str(out), "--format", fmt, "--expand-repeats"]) == 0
    assert "written expanded" in capsys.readouterr().err  # the notes, on stderr
    for name, t in tensors.items():
        if fmt == "npy":
            got = np.load(out / f"{name}.npy")
        elif fmt == "npz":
            with np.load(out) as npz:
                got = npz[name]
        else:
            from safetensors.numpy import load_file

            got = load_file(str(out))[name]
        np.testing.assert_array_equal(got, t.contiguous().numpy())


@pytest.mark.gui
def test_the_export_dialog_offers_the_expansion_with_its_size(hostile, qtbot, tmp_path) -> None:
    from ckptview.core.errors import CheckpointError
    from ckptview.gui.export.dialog import ExportDialog

    ckpt = open_checkpoint(hostile)
    dialog = ExportDialog(ckpt, [])
    qtbot.addWidget(dialog)
    dialog.path_edit.setText(str(tmp_path / "out.npz"))
    dialog.format_box.setCurrentIndex(1)
    assert not dialog.expand_box.isHidden()
    declared = 8_000_000 + 8 * 1536 ** 2 + 2048 ** 2
    assert f"{declared:,} elements" in dialog.expand_box.text()
    with pytest.raises(CheckpointError, match="declares") as refused:
        dialog.plan()
    assert Hint(Fix.EXPAND_REPEATS) in hints_of(refused.value)
    notes = dialog.notes.toPlainText()
    assert "declares" in notes and "--" not in notes and not dialog.export_button.isEnabled()
    dialog.expand_box.setChecked(True)
    assert dialog.plan().total_bytes >= declared * 4 and dialog.export_button.isEnabled()


# -- statistics, histograms, heat-maps --------------------------------------------------------------


def test_figures_read_what_is_stored(hostile) -> None:
    from ckptview.core.figures.analysis import Analysis
    from ckptview.core.jobs import drain

    ckpt = open_checkpoint(hostile)
    loaded = torch.load(hostile, weights_only=True)
    analysis = Analysis()
    for name in ("s0", "rows0", "win"):
        info = ckpt.tensor(name)
        with Bound() as bound:
            stats = drain(analysis.stats([info]))
            hist = drain(analysis.histogram(info, 32))
            picture = drain(analysis.matrix_preview(info))
        bound.check(f"figures of {name}")
        found = repeats(info)
        assert picture.stored_only and "declares" in picture.stored_only
        if found.exact:  # stride 0: every stored value repeats as often: the whole tensor's figures
            want = loaded[name].double()
            assert stats.numel == want.numel() and hist.counts.sum() == want.numel()
            assert stats.mean == pytest.approx(float(want.mean()), rel=1e-9, abs=1e-12)
            assert stats.max == float(want.max()) and stats.min == float(want.min())
        else:  # overlapping: the stored elements' own figures, each once
            view = loaded[name]  # the storage elements its view spans, as torch holds them
            values = torch.as_strided(view, (found.stored,), (1,), view.storage_offset()).double()
            assert stats.numel == found.stored == values.numel() and hist.counts.sum() == values.numel()
            assert stats.mean == pytest.approx(float(values.mean()), rel=1e-9)
        assert math.isfinite(stats.std)


@pytest.mark.gui
def test_the_window_says_what_repeats_and_what_the_figures_are_of(hostile, qtbot) -> None:
    from ckptview.core.figures.analysis import Analysis
    from ckptview.gui.checkpoint.detail import DetailPanel
    from ckptview.gui.panels.statistics import repeats_note

    ckpt = open_checkpoint(hostile)
    info = ckpt.tensor("s0")
    note = repeats_note([("s0", [info])])
    assert note.startswith("s0: figures of its 1 stored elements, each stored value counted as often as it "
                           "repeats (exact): it declares 8,000,000 elements")
    assert repeats_note([("plain", [ckpt.tensor("plain")])]) == ""
    detail = DetailPanel(ckpt)
    qtbot.addWidget(detail)
    detail.setHtml(detail._tensor_html("s0", info))
    assert "Repeats storage" in detail.toPlainText() and "declares 8,000,000 elements" in detail.toPlainText()
    assert Analysis  # the panels ask the same Analysis as test_figures_read_what_is_stored


# -- diff -------------------------------------------------------------------------------------------


def test_diff_is_bounded_and_compares_what_it_can(tmp_path, capsys) -> None:
    gen = torch.Generator().manual_seed(4)
    row, col = torch.randn(1, 2000, generator=gen), torch.randn(2000, 1, generator=gen)
    same = torch.randn(1, 2000, generator=gen)
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"cross": row.expand(2000, 2000), "same": same.expand(2000, 2000), "one": row.expand(2000, 2000)},
               a)
    changed = same.clone()
    changed[0, 7] += 1.0
    torch.save({"cross": col.expand(2000, 2000), "same": changed.expand(2000, 2000),
                "one": torch.randn(2000, 2000, generator=gen)}, b)
    with Bound() as bound:
        status = main(["diff", str(a), str(b), "--json"])
    bound.check("diff")
    assert status == 2  # a pair refused is a tensor not compared: diff's exit status for an error row
    rows = {t["name"]: t for t in json.loads(capsys.readouterr().out)["tensors"]}
    assert rows["cross"]["status"] == "error" and "values not compared" in rows["cross"]["error"]
    assert rows["same"]["status"] == "changed" and rows["same"]["frac_changed"] == pytest.approx(1 / 2000)
    assert rows["one"]["status"] == "changed"  # one side stores every element it holds: compared whole
