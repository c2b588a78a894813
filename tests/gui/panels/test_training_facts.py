"""The Training panel's facts (issue 35, finding 8): Lightning's callback keys are shortened so values stay in
view (the whole key in the tooltip), and a module's `training` attribute is not a fact of the run."""

from __future__ import annotations

import pytest
import torch

from ckptview.core import open_checkpoint


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


def test_lightning_callbacks_are_told_apart_where_they_are_read(qtbot, lightning_file):
    """Lightning's callback state keys repeat the init arguments (`ModelCheckpoint{'monitor': 'train_loss',
    'mode': 'min', ...}.best_model_path`): as a column of names they pushed the values off screen, and cut to
    fit they lost what tells two callbacks apart. Each callback gets a section titled by the arguments that
    differ (whole, wrapped; the state key in its tooltip), its fields below by their own names."""
    from PySide6.QtWidgets import QLabel

    raw = torch.load(lightning_file, weights_only=False)
    keys = [k for k in raw["callbacks"] if k.startswith("ModelCheckpoint{")]
    assert len(keys) == 2 and all(len(k) > 60 for k in keys)  # Lightning's state keys: the init arguments
    ck, panel = panel_for(qtbot, lightning_file)
    try:
        titles = panel.callback_titles()
        assert len(titles) == 2 and all(t.startswith("ModelCheckpoint{monitor=") for t in titles), titles
        best = "ModelCheckpoint{monitor=train_loss}"
        assert best in titles
        key = next(k for k in keys if "train_loss" in k)
        rows = {name: value for name, value in panel.callback_rows(best)}
        assert rows["best_model_path"] == raw["callbacks"][key]["best_model_path"]
        assert float(rows["best_model_score"]) == pytest.approx(float(raw["callbacks"][key]["best_model_score"]),
                                                                rel=1e-5)
        table = panel.tables["Callback " + best]
        tips = {table.item(r, 0).text(): table.item(r, 0).toolTip() for r in range(table.rowCount())}
        assert tips["best_model_path"] == f"callbacks.{key}.best_model_path"  # the key as the file has it
        labels = {lab.text().replace("\u200b", "").removeprefix("<b>").removesuffix("</b>"): lab
                  for lab in panel.findChildren(QLabel)}
        title = labels["Callback " + best]
        assert title.toolTip() == key and title.wordWrap()
        qtbot.waitUntil(lambda: 0 < title.width() <= panel.width(), timeout=5_000)  # whole: wrapped, never cut
        value_column = table.columnViewportPosition(1)
        assert 0 < value_column <= 0.6 * panel.width()  # the values are on screen in a 420 px panel
        assert not any(k.startswith("callbacks.") for k in panel.facts())  # the Run table keeps the run's facts
    finally:
        ck.close()


def test_callback_facts_split_where_the_state_key_ends():
    from ckptview.core.inspect.training import callback_fact

    assert callback_fact("callbacks.ModelCheckpoint{'monitor': 'val.loss', 'min_delta': 0.01}.best_model_path") == (
        "ModelCheckpoint{'monitor': 'val.loss', 'min_delta': 0.01}", "best_model_path")
    assert callback_fact("callbacks.Timer.time_elapsed") == ("Timer", "time_elapsed")
    assert callback_fact("epoch") is None and callback_fact("callbacks.x") is None


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


def test_short_keys_take_a_look_at_each_character_once():
    """A 200,000-letter fact key (a hostile or broken file's name) held the window: the state-key pattern
    was tried at every letter and ran to the end from each. Keys are shortened only up to a bound, and the
    pattern is tried where a word starts."""
    from ckptview.core.inspect.training import MAX_SHORTENED, short_fact_keys

    huge = "layers." + "w" * 200_000 + ".weight"
    assert short_fact_keys([huge, "epoch"]) == [huge, "epoch"]
    near = "x" * (MAX_SHORTENED - 40) + " ModelCheckpoint{'monitor': 'a'}.best"
    assert short_fact_keys([near]) == [near.replace("{'monitor': 'a'}", "")]
    lightning = ["callbacks.ModelCheckpoint{'monitor': 'a', 'mode': 'min'}.best",
                 "callbacks.ModelCheckpoint{'monitor': 'b', 'mode': 'min'}.best"]
    assert short_fact_keys(lightning) == ["ModelCheckpoint{monitor=a}.best", "ModelCheckpoint{monitor=b}.best"]
