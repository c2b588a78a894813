"""Tools > Compute On…: the window's comparisons and exports read their values where the setting says (this
machine, or a Dask cluster whose workers open the files), with the figures and files of this machine."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from ckptview.core.sweep import plan as sweep_plan
from ckptview.core.sweep import runner as sweep_runner
from ckptview.core.sweep.runner import LOCAL, Placement
from ckptview.gui.app.compute_on import ComputeOnDialog, choose_compute
from ckptview.gui.compare.tab import CompareTab, open_diff
from ckptview.gui.export import dialog as export_dialog
from tests.gui.app.test_dialogs_fit import fits
from tests.support.guihelpers import wait_settled

LEFT = Qt.MouseButton.LeftButton


def _ok(dialog: ComputeOnDialog) -> bool:
    return dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()


def test_the_choice_is_kept_in_the_settings_and_read_by_the_window(qtbot, window):
    assert window.placement() == LOCAL  # nothing chosen: this machine
    dialog = choose_compute(window)
    qtbot.addWidget(dialog)
    qtbot.waitExposed(dialog)
    ok, sizes = fits(dialog)
    assert ok, sizes
    assert dialog.here.isChecked() and not dialog.address_edit.isEnabled() and _ok(dialog)
    dialog.cluster.setChecked(True)
    assert not _ok(dialog)  # no address yet
    dialog.address_edit.setText("scheduler:8786")
    assert not _ok(dialog)  # not an address Dask takes
    dialog.address_edit.setText("tcp://10.0.0.5:8786")
    assert _ok(dialog)
    dialog.accept()
    assert window.settings.scheduler() == "tcp://10.0.0.5:8786"
    assert window.placement() == Placement("tcp://10.0.0.5:8786")
    assert "tcp://10.0.0.5:8786" in window.statusBar().currentMessage()
    again = choose_compute(window)
    qtbot.addWidget(again)
    assert again.cluster.isChecked() and again.address_edit.text() == "tcp://10.0.0.5:8786"
    again.here.setChecked(True)
    again.accept()
    assert window.settings.scheduler() is None and window.placement() == LOCAL


def test_the_menu_has_the_item(window):
    assert "Compute On…" in [a.text() for a in window.menus.menu("Tools").actions()]


@pytest.fixture()
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=":0") as local:
        yield local


@pytest.fixture()
def pair(tmp_path):
    torch.manual_seed(2)
    a = {f"layer{i}.weight": torch.randn(300, 200) for i in range(6)}
    b = {k: v + 0.01 * torch.randn_like(v) for k, v in a.items()}
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    return str(tmp_path / "a.pt"), str(tmp_path / "b.pt")


@pytest.mark.slow
def test_a_comparison_and_an_export_run_on_the_chosen_cluster(qtbot, window, cluster, pair, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_plan, "MIN_TASK_BYTES", 1 << 18)  # several tasks of these small files
    local = CompareTab(*pair)
    qtbot.addWidget(local)
    with qtbot.waitSignal(local.finished, timeout=60_000):
        local.start()
    window.settings.set_scheduler(cluster.scheduler_address)
    tasks: list[int] = []
    real_run = sweep_runner.Sweep.run

    def counted(self, fn, items, token=None):
        tasks.append(len(items))
        return real_run(self, fn, items, token)

    monkeypatch.setattr(sweep_runner.Sweep, "run", counted)
    view = open_diff(window, *pair)
    assert view.placement == Placement(cluster.scheduler_address)
    with qtbot.waitSignal(view.finished, timeout=60_000):
        pass
    assert tasks and tasks[0] >= 2
    assert json.dumps(view.result.to_json()) == json.dumps(local.result.to_json())

    (tab,) = window.open_paths([pair[0]])
    wait_settled(qtbot, tab)
    tasks.clear()
    dialog = export_dialog.export_nodes(window)
    qtbot.addWidget(dialog)
    assert dialog.placement == Placement(cluster.scheduler_address)
    dialog.format_box.setCurrentIndex(dialog.format_box.findData("safetensors"))
    dialog.path_edit.setText(str(tmp_path / "dask.safetensors"))
    qtbot.mouseClick(dialog.export_button, LEFT)
    qtbot.waitUntil(lambda: dialog.result is not None, timeout=60_000)
    assert tasks and tasks[0] >= 2
    here = export_dialog.ExportDialog(tab.context.checkpoint, None, window)
    qtbot.addWidget(here)
    here.format_box.setCurrentIndex(here.format_box.findData("safetensors"))
    here.path_edit.setText(str(tmp_path / "here.safetensors"))
    qtbot.mouseClick(here.export_button, LEFT)
    qtbot.waitUntil(lambda: here.result is not None, timeout=60_000)
    digests = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("dask.safetensors", "here.safetensors")]
    assert digests[0] == digests[1]
