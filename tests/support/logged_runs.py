"""Training runs written by their libraries, with what those libraries logged (test helper, not a test module).

- `hf_trainer_run`: the Hugging Face Trainer on a tiny GPT-2 for six steps, logging every step, evaluating
  and saving every two (`checkpoint-2/4/6/`, each with its `trainer_state.json`), with its TensorBoard
  callback (`runs/<date>_<host>/events.out.tfevents.*`); returns the Trainer's own `state.log_history`.
- `lightning_run`: Lightning with its TensorBoardLogger (`lightning_logs/version_0/`: events, `hparams.yaml`,
  `checkpoints/epoch=E-step=S.ckpt` every two steps, a ModelCheckpoint monitoring `train_loss`), Adam and
  StepLR, a LearningRateMonitor.
- `plain_run`: a plain loop, Adam + StepLR, `torch.save` of a dict per epoch (epoch, model, optimizer,
  scheduler, loss); returns what the loop recorded at each save.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Run:
    """A run's folder (what a user opens), its checkpoints, and what the library logged."""

    folder: str
    checkpoints: list[str]
    logged: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def plain_run(folder: str, epochs: int = 8, lr: float = 0.003, spike_at: int | None = None) -> Run:
    """Adam (lr 0.003) + StepLR(step_size=3, gamma=0.5) over `epochs` epochs of four steps; `epoch_E.pt` per
    epoch. With `spike_at`, the last layer's weights are multiplied by 8 before that epoch's last batch (the
loss spikes where one module jumped)."""
    import torch
    from torch import nn

    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 8, generator=gen), torch.randn(64, 4, generator=gen)
    run = Run(folder, [])
    for epoch in range(epochs):
        loss = torch.tensor(0.0)
        for batch in range(4):
            xb, yb = x[batch * 16:(batch + 1) * 16], y[batch * 16:(batch + 1) * 16]
            if spike_at == epoch and batch == 3:
                with torch.no_grad():  # a bad step: the last layer's weights blown up, the loss with them
                    model[2].weight.mul_(8)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            optimizer.step()
        scheduler.step()
        path = os.path.join(folder, f"epoch_{epoch}.pt")
        torch.save({"epoch": epoch, "model_state_dict": model.state_dict(),
                    "optimizer_state_dict": optimizer.state_dict(), "scheduler_state_dict": scheduler.state_dict(),
                    "loss": loss.item()}, path)
        run.checkpoints.append(path)
        run.logged.append({"epoch": epoch, "loss": loss.item(), "lr": optimizer.param_groups[0]["lr"],
                           "last_lr": scheduler.get_last_lr()[0]})
    return run


def lightning_run(folder: str) -> Run:
    """`Trainer.fit` for three epochs of four steps with a TensorBoardLogger; checkpoints every two steps."""
    import lightning as L
    import torch
    from torch import nn

    class Classifier(L.LightningModule):
        def __init__(self, hidden: int = 32, lr: float = 0.01) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.encoder = nn.Sequential(nn.Linear(20, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.head = nn.Linear(hidden, 4)

        def training_step(self, batch: Any, _index: int) -> Any:
            x, y = batch
            loss = nn.functional.cross_entropy(self.head(self.encoder(x)), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 20), torch.randint(0, 4, (32,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    logger = L.pytorch.loggers.TensorBoardLogger(folder, name="lightning_logs")
    checkpoint = L.pytorch.callbacks.ModelCheckpoint(monitor="train_loss", save_top_k=-1, every_n_train_steps=2)
    rates = L.pytorch.callbacks.LearningRateMonitor(logging_interval="step")
    with warnings.catch_warnings():  # Lightning's advice on data loader workers: not ours to heed
        warnings.simplefilter("ignore")
        trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=logger, log_every_n_steps=1,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=[checkpoint, rates],
                            default_root_dir=folder)
        trainer.fit(Classifier(), loader)
    version = logger.log_dir
    checkpoints = os.path.join(version, "checkpoints")
    paths = sorted((os.path.join(checkpoints, n) for n in os.listdir(checkpoints)),
                   key=lambda p: int(p.rsplit("step=", 1)[1].split(".")[0]))
    return Run(checkpoints, paths, extra={"log_dir": version, "best": checkpoint.best_model_path,
                                          "best_score": float(checkpoint.best_model_score)})


def hf_trainer_run(folder: str) -> Run:
    """The Trainer on a tiny GPT-2: six steps, logging_steps=1, eval and save every two steps, TensorBoard."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config)

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int) -> dict[str, Any]:
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    args = transformers.TrainingArguments(
        output_dir=folder, max_steps=6, per_device_train_batch_size=4, logging_steps=1, save_steps=2,
        eval_strategy="steps", eval_steps=2, learning_rate=1e-3, report_to=["tensorboard"], use_cpu=True,
        disable_tqdm=True, load_best_model_at_end=True, metric_for_best_model="eval_loss")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), eval_dataset=Tokens())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    paths = [os.path.join(folder, f"checkpoint-{s}") for s in (2, 4, 6)]
    return Run(folder, paths, list(trainer.state.log_history),
               extra={"best": trainer.state.best_model_checkpoint, "best_metric": trainer.state.best_metric})


def event_scalars(folder: str) -> dict[str, list[tuple[int, float]]]:
    """Every tag of the scalars plugin in the event files of `folder`, as tensorboard's own reader gives them
    (its plugin accumulator: simple values and TF2's tensor scalars alike)."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(folder, size_guidance={"tensors": 0})
    acc.Reload()
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto).item())) for e in acc.Tensors(tag)]
            for tag in acc.PluginTagToContent("scalars")}
