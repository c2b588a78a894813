"""The analysis layer: one streamed read per tensor, shared by every panel that asks (no Qt)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckptview.core import open_checkpoint
from ckptview.core.errors import Cancelled, TensorDataError
from ckptview.core.figures.analysis import Analysis, PreviewReady, StatsReady, TargetFailed
from ckptview.core.jobs import CancelToken, drain


@pytest.fixture
def ckpt(tmp_path):
    g = torch.Generator().manual_seed(1)
    sd = {"w": torch.randn(300, 70, generator=g), "h": torch.randn(50, 40, generator=g).to(torch.bfloat16)}
    path = tmp_path / "m.pt"
    torch.save(sd, path)
    ck = open_checkpoint(str(path))
    yield ck, torch.load(path, weights_only=True)
    ck.close()


def info_of(ck, name):
    return next(e.info for e in ck.tensors() if e.name == name)


def test_concurrent_requests_for_one_tensor_read_it_once(ckpt) -> None:
    ck, ref = ckpt
    analysis = Analysis(chunk_elems=1000)  # several chunks: a job can be caught in the middle
    info = info_of(ck, "w")
    leader = analysis.summary(info, CancelToken())
    next(leader)  # the leader is inside its pass, holding the flight
    follower = analysis.summary(info, CancelToken())
    next(follower)  # waits for the leader (one wait slice), reporting its progress
    first = drain(leader)
    second = drain(follower)
    assert analysis.passes == 1
    assert first is second
    assert first.stats.numel == ref["w"].numel()
    assert first.stats.mean == pytest.approx(float(ref["w"].double().mean()))


def test_a_cancelled_leader_hands_the_read_to_the_waiting_request(ckpt) -> None:
    ck, ref = ckpt
    analysis = Analysis(chunk_elems=1000)
    info = info_of(ck, "w")
    token = CancelToken()
    leader = analysis.summary(info, token)
    next(leader)
    follower = analysis.summary(info, CancelToken())
    next(follower)
    token.cancel()
    with pytest.raises(Cancelled):
        drain(leader)
    summary = drain(follower)  # takes the lead and reads the tensor itself
    assert summary.stats.max == pytest.approx(float(ref["w"].max()))
    assert analysis.passes == 2
    assert analysis.cached_summary(info) is summary


def test_a_failed_read_reaches_every_waiting_request_as_one_line(ckpt, monkeypatch) -> None:
    ck, _ = ckpt
    analysis = Analysis()
    info = info_of(ck, "w")

    def broken_chunks(_info, _ahead=None):
        def chunks():
            yield np.zeros(4, dtype=np.float32)
            raise TensorDataError("storage 'data/0' missing")
        return chunks

    monkeypatch.setattr(analysis, "_chunks", broken_chunks)
    leader = analysis.summary(info)
    next(leader)
    follower = analysis.summary(info)
    next(follower)
    with pytest.raises(TensorDataError, match="storage 'data/0' missing"):
        drain(leader)
    with pytest.raises(TensorDataError, match="storage 'data/0' missing"):
        drain(follower)


def test_statistics_then_histogram_cost_one_summary_pass(ckpt) -> None:
    ck, ref = ckpt
    analysis = Analysis()
    w, h = info_of(ck, "w"), info_of(ck, "h")
    events = []
    gen = analysis.stats_job([[w], [h]])
    while True:
        try:
            events.append(next(gen))
        except StopIteration:
            break
    ready = [e for e in events if isinstance(e, StatsReady)]
    assert [e.index for e in ready] == [0, 1]
    assert analysis.passes == 2  # one per tensor
    hists = drain(analysis.histogram_job([w, h], 64, False))
    # bf16 has a value table; the float32 tensor's values were kept from its statistics pass (it is small):
    # neither histogram reads the file again.
    assert analysis.passes == 2
    x = ref["w"].double().numpy().reshape(-1)
    assert np.array_equal(hists[0].counts, np.histogram(x, 64, (x.min(), x.max()))[0])
    drain(analysis.histogram_job([w, h], 64, False))  # cached: no read at all
    assert analysis.passes == 2


def test_module_statistics_merge_the_tensors(ckpt) -> None:
    ck, ref = ckpt
    analysis = Analysis()
    stats = drain(analysis.stats([info_of(ck, "w"), info_of(ck, "h")]))
    both = torch.cat([ref["w"].double().reshape(-1), ref["h"].double().reshape(-1)])
    assert stats.numel == both.numel()
    assert stats.mean == pytest.approx(float(both.mean()))
    assert stats.std == pytest.approx(float(both.std()))


def test_jobs_speak_in_typed_events(ckpt, monkeypatch) -> None:
    ck, _ = ckpt
    analysis = Analysis()
    w = info_of(ck, "w")
    events = []
    gen = analysis.histogram_job([w], 16, False)
    try:
        while True:
            events.append(next(gen))
    except StopIteration:
        pass
    assert any(isinstance(e, PreviewReady) and e.index == 0 for e in events)

    def failing(*_a, **_k):
        raise TensorDataError("boom")
        yield  # pragma: no cover

    monkeypatch.setattr(analysis, "stats", failing)
    out = []
    gen = analysis.stats_job([[w]])
    try:
        while True:
            out.append(next(gen))
    except StopIteration:
        pass
    assert out == [TargetFailed(0, "boom")]


def test_a_closed_leader_is_not_a_failure_for_the_waiting_request(ckpt) -> None:
    """A worker that stops its job closes the generator (GeneratorExit): the follower takes the lead."""
    ck, ref = ckpt
    analysis = Analysis(chunk_elems=1000)
    info = info_of(ck, "w")
    leader = analysis.summary(info, CancelToken())
    next(leader)
    follower = analysis.summary(info, CancelToken())
    next(follower)
    leader.close()  # what GeneratorWorker does when its job is cancelled between yields
    summary = drain(follower)
    assert summary.stats.numel == ref["w"].numel()


def test_a_tensor_too_large_to_keep_is_read_again_for_its_exact_bins(ckpt, monkeypatch) -> None:
    from ckptview.core.figures import analysis as module

    ck, ref = ckpt
    monkeypatch.setattr(module, "KEEP_VALUES_BYTES", 1000)  # "w" (84 KB) is now too large to keep
    analysis = Analysis()
    w = info_of(ck, "w")
    drain(analysis.stats_job([[w]]))
    hist = drain(analysis.histogram_job([w], 32, False))[0]
    assert analysis.passes == 2  # statistics, then the counting pass over the range they found
    x = ref["w"].double().numpy().reshape(-1)
    assert np.array_equal(hist.counts, np.histogram(x, 32, (x.min(), x.max()))[0])


def test_an_expanded_tensor_is_read_as_what_it_stores(tmp_path, monkeypatch) -> None:
    from ckptview.core.figures import stats as stats_module
    from ckptview.core.read.values import reading as values

    read = []
    real = values.iter_chunks  # as the statistics read values
    monkeypatch.setattr(stats_module, "iter_chunks", lambda *a, **k: (read.append(c.size) or c for c in real(*a, **k)))
    base = torch.arange(6, dtype=torch.float32).reshape(1, 6)
    torch.save({"e": base.expand(5000, 6)}, tmp_path / "e.pt")
    ck = open_checkpoint(str(tmp_path / "e.pt"))
    try:
        analysis = Analysis()
        info = ck.tensor("e")
        stats = drain(analysis.stats([info]))
        ref = base.expand(5000, 6).double()
        assert stats.numel == ref.numel() and stats.mean == pytest.approx(float(ref.mean()))
        assert stats.std == pytest.approx(float(ref.std()))
        hist = drain(analysis.histogram_job([info], 6, False))[0]
        assert hist.counts.tolist() == [5000] * 6
        assert sum(read) == 6  # the six stored values, not the 30,000 the tensor declares
    finally:
        ck.close()


def test_heat_maps_come_from_the_analysis_computed_once_per_tensor_and_axis(ckpt, monkeypatch) -> None:
    from ckptview.core.figures import analysis as analysis_module
    from ckptview.core.figures.heatmap import iter_tensor_heatmap

    ck, ref = ckpt
    analysis = Analysis()
    info = info_of(ck, "w")
    first = drain(analysis.matrix_preview(info, 0))
    assert np.array_equal(first.image, drain(iter_tensor_heatmap(info, 0)).image)
    assert first.matrix_shape == tuple(ref["w"].shape) and np.array_equal(first.image, ref["w"].double().numpy())
    assert drain(analysis.matrix_preview(info, 0)) is first and analysis.heatmap_passes == 1
    by_columns = drain(analysis.matrix_preview(info, 1))  # another axis: another picture
    assert np.array_equal(by_columns.image, ref["w"].double().numpy().T) and analysis.heatmap_passes == 2
    monkeypatch.setattr(analysis_module, "KEEP_HEATMAPS", 2)  # only the last few are kept
    h = info_of(ck, "h")
    drain(analysis.matrix_preview(h, 0))
    assert analysis.cached_matrix_preview(info, 0) is None and analysis.cached_matrix_preview(h, 0) is not None


def test_values_pages_read_only_their_bytes_and_equal_torch(ckpt) -> None:
    from ckptview.core.read.values.slicing import SliceError

    ck, ref = ckpt
    analysis = Analysis()
    view = analysis.values_slice(info_of(ck, "w"), "[10:, :]")
    assert view.shape == (290, 70)
    page = analysis.values_page(view, slice(5, 9), slice(60, 70))
    assert np.array_equal(page, ref["w"][15:19, 60:70].numpy())
    with pytest.raises(SliceError):
        analysis.values_slice(info_of(ck, "w"), "[0, 0, 0]")
