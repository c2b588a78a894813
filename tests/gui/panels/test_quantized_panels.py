"""A quantized weight in the window: its statistics and histogram are the dequantized weight's, the histogram's
"codes" view shows its stored levels (16 for 4 bits), and the detail panel names its scheme and parts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pytestqt")

from ckptview.core import open_checkpoint  # noqa: E402
from ckptview.core.figures.stats import tensor_stats  # noqa: E402
from ckptview.core.inspect.grouping import find_row, group_tree  # noqa: E402
from ckptview.gui.checkpoint.detail import DetailPanel  # noqa: E402
from ckptview.gui.panels.statistics import StatsPanel, format_figure  # noqa: E402
from tests.support.quantized import gptq_pack, write_folder  # noqa: E402


@pytest.fixture
def gptq(tmp_path):
    torch.manual_seed(0)
    parts, reference = gptq_pack(torch.randn(64, 128) * 0.02, bits=4, group_size=32, act_order=True)
    write_folder(tmp_path, {f"l.{k}": v for k, v in parts.items()}, {"quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True}})
    ck = open_checkpoint(str(tmp_path))
    yield ck, parts, reference
    ck.close()


def _row_node(ck, name):
    return find_row(group_tree(ck.root), name).node


def test_the_statistics_and_histogram_are_the_weights(qtbot, gptq) -> None:
    ck, _parts, reference = gptq
    panel = StatsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=20_000):
        panel.set_selection([_row_node(ck, "l.weight")])
    values = reference.double()
    assert panel.figures()["mean"] == format_figure("mean", float(values.mean()), values.numel())
    counts = panel.histogram.plotted_counts()[0]
    x = reference.float().reshape(-1).numpy().astype(np.float64)
    assert np.array_equal(counts, np.histogram(x, 100, (x.min(), x.max()))[0])
    assert panel.histogram.codes.isVisibleTo(panel)


def test_the_codes_view_has_the_sixteen_levels(qtbot, gptq) -> None:
    ck, _parts, _reference = gptq
    panel = StatsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignals([panel.statsReady, panel.histogram.exactReady], timeout=20_000):
        panel.set_selection([_row_node(ck, "l.weight")])
    with qtbot.waitSignal(panel.histogram.exactReady, timeout=20_000):
        panel.histogram.codes.setChecked(True)
    counts = panel.histogram.plotted_counts()[0]
    info = ck.tensor("l.weight")
    codes = np.concatenate(list(info.storage.source.iter_codes(1 << 16))).astype(np.int64)
    levels = np.bincount(codes, minlength=16)
    assert counts.size == 16  # one bin per level
    assert np.array_equal(counts[counts > 0], levels[levels > 0])
    assert tensor_stats(info).numel == counts.sum()


def test_the_detail_panel_names_the_scheme_and_parts(qtbot, gptq) -> None:
    ck, _parts, _reference = gptq
    panel = DetailPanel(ck)
    qtbot.addWidget(panel)
    top = group_tree(ck.root)
    row = find_row(top, "l.weight")
    assert [c.name for c in row.children] == ["l.qweight", "l.qzeros", "l.scales", "l.g_idx"]
    panel.show_row(row)
    text = panel.toPlainText()
    assert "int4 GPTQ, group 32, act-order" in text and "bits per weight" in text and "l.qzeros" in text
    panel.show_row(row.children[0])
    assert "Part of" in panel.toPlainText()
