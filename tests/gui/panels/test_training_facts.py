"""The Training panel's facts (issue 35, finding 8): Lightning's callback keys are shortened so values stay in
view (the whole key in the tooltip), and a module's `training` attribute is not a fact of the run."""

from __future__ import annotations

import pytest
import torch

from ckptview.core import open_checkpoint

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_level_fail("WARNING"),
              pytest.mark.qt_log_ignore("This plugin does not support")]


@pytest.fixture(scope="module")
def lightning_file(tmp_path_factory):
    """A checkpoint Lightning writes after two training steps, with two ModelCheckpoint callbacks."""
    L = pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import ModelCheckpoint

    class Net(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, _index):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    folder = tmp_path_factory.mktemp("lightning")
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
    callbacks = [ModelCheckpoint(dirpath=folder, monitor="train_loss", mode="min"),
                 ModelCheckpoint(dirpath=folder / "every", every_n_epochs=1)]
    trainer = L.Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1, callbacks=callbacks, default_root_dir=folder)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice (workers, log interval) is not the test's
        trainer.fit(Net(), data)
    path = folder / "last.ckpt"
    trainer.save_checkpoint(path)
    return path


def panel_for(qtbot, path):
    from ckptview.gui.panels.training import TrainingPanel

    ck = open_checkpoint(str(path))
    panel = TrainingPanel(checkpoint=ck)
    qtbot.addWidget(panel)
    panel.resize(420, 500)
    with qtbot.waitSignal(panel.summaryReady, timeout=20_000):
        panel.show()
    return ck, panel


def test_lightning_callback_keys_are_short_and_whole_in_the_tooltip(qtbot, lightning_file):
    raw = torch.load(lightning_file, weights_only=False)
    keys = [k for k in raw["callbacks"] if k.startswith("ModelCheckpoint{")]
    assert len(keys) == 2 and all(len(k) > 60 for k in keys)  # Lightning's state keys: the init arguments
    ck, panel = panel_for(qtbot, lightning_file)
    try:
        table = panel.tables["Run"]
        shown = {table.item(r, 0).text(): table.item(r, 0).toolTip() for r in range(table.rowCount())}
        paths = {name: tip for name, tip in shown.items() if tip.endswith(".best_model_path")}
        assert len(paths) == 2  # the two callbacks told apart
        for name, tip in paths.items():
            assert len(name) <= 60, name
            assert tip.startswith("callbacks.ModelCheckpoint{") and tip.endswith(".best_model_path")
        assert {tip.split(".", 1)[1].rsplit(".", 1)[0] for tip in paths.values()} == set(keys)
        assert any("train_loss" in name for name in paths)  # what tells them apart is kept
        value_column = table.columnViewportPosition(1)
        assert 0 < value_column <= 0.6 * panel.width()  # the values are on screen in a 420 px panel
        best = next(r for r in range(table.rowCount()) if table.item(r, 0).text() in paths
                    and "train_loss" in table.item(r, 0).text())
        assert table.item(best, 0).text() == "ModelCheckpoint{monitor=train_loss}.best_model_path"
        assert table.item(best, 1).text() == raw["callbacks"][next(k for k in keys if "train_loss" in k)][
            "best_model_path"]
    finally:
        ck.close()


def test_a_modules_training_attribute_is_not_a_run_fact(qtbot, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    model.eval()
    path = tmp_path / "whole.pt"
    torch.save(model, path)  # a full-model pickle: the module's own attributes, `training` among them
    ck, panel = panel_for(qtbot, path)
    try:
        assert "training" not in panel.facts()
        assert not any(key.endswith(".training") for key in panel.facts())
    finally:
        ck.close()
    torch.save({"model": model.state_dict(), "training": True, "epoch": 2}, tmp_path / "dict.pt")
    ck, panel = panel_for(qtbot, tmp_path / "dict.pt")  # a key of the file's own dict is a fact
    try:
        assert panel.facts()["training"] == "True" and panel.facts()["epoch"] == "2"
    finally:
        ck.close()
