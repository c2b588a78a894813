"""The series view's state without Qt: its phase, the curves drawn by default, a chosen step, the labels."""

from __future__ import annotations

from ckptview.core.series.discover import Position
from ckptview.core.series.logged import RunLog, ScalarCurve
from ckptview.core.series.model import CheckpointRef, SeriesResult
from ckptview.core.series.view_state import METRICS, RATES, Phase, SeriesViewState


def result() -> SeriesResult:
    refs = [CheckpointRef(f"/run/checkpoint-{s}", Position(step=s, epoch=s / 10), values={"lr": 0.1 / s, "loss": 1.0 / s})
            for s in (10, 20, 30)]
    log = RunLog()
    dense = ScalarCurve("loss", "trainer_state.json")
    same = ScalarCurve("train/loss", "events: runs/a")
    rate = ScalarCurve("learning_rate", "trainer_state.json")
    for step in range(1, 31):
        dense.add(step, step / 10, 2.0 / step)
        same.add(step, step / 10, 2.0 / step)
        rate.add(step, step / 10, 0.1 / step)
    log.curves += [dense, same, rate, ScalarCurve("eval_runtime", "trainer_state.json", steps=[10], epochs=[1.0],
                                                  values=[3.0])]
    return SeriesResult(refs, "step", log=log)


def test_the_phase_goes_from_loading_to_ready_error_or_cancelled() -> None:
    view = SeriesViewState()
    assert view.phase == "loading" and view.phase is Phase.LOADING
    view.planned(result())
    assert view.phase == "loading"
    view.finished(view.result)
    assert view.phase == "ready" and view.error is None
    view.failed("not a training run")
    assert view.phase == Phase.ERROR and view.error == "not a training run"
    view.cancelled()
    assert view.phase == "cancelled"


def test_losses_and_rates_are_drawn_by_default_each_once() -> None:
    view = SeriesViewState()
    view.planned(result())
    keys = {line.key: line for line in view.lines()}
    # Two sources of "loss": told apart by their source; the event file's copy of the same points is not drawn.
    assert {"loss (trainer_state.json)", "loss (checkpoint)", "lr", "learning_rate", "train/loss"} <= set(keys)
    drawn = {line.key for line in view.drawn()}
    assert drawn == {"loss (trainer_state.json)", "loss (checkpoint)", "learning_rate", "lr"}
    assert keys["lr"].plot == RATES and keys["loss (checkpoint)"].plot == METRICS
    view.choose_curve("eval_runtime", True)
    view.choose_curve("lr", False)
    view.finished(view.result)  # read again (a watch): the user's choice stays
    assert {line.key for line in view.drawn()} == {"loss (trainer_state.json)", "loss (checkpoint)",
                                                   "learning_rate", "eval_runtime"}


def test_a_chosen_step_selects_the_nearest_checkpoint() -> None:
    view = SeriesViewState()
    assert view.choose_step(12.0) is None  # nothing read yet
    view.planned(result())
    assert view.choose_step(12.0) == 0 and view.choose_step(26.0) == 2 and view.checkpoint == 2
    assert view.choose_step(15.0) == 0  # halfway: the earlier one
    text = view.checkpoint_text(1)
    assert text.startswith("step 20: checkpoint-20") and "lr 0.005" in text and "loss (checkpoint) 0.05" in text
    # The dense loss at a checkpoint: the last value logged at or before its step.
    assert "loss (trainer_state.json) 0.1" in text


def test_marks_and_labels_follow_the_run_axis() -> None:
    view = SeriesViewState()
    view.planned(result())
    line = next(line for line in view.lines() if line.key == "learning_rate")
    assert line.marks(view.result.x_values()) == ([10.0, 20.0, 30.0], [0.01, 0.005, 0.1 / 30])
    assert view.axis_label() == "step" and view.column_label(2) == "30"
    by_epoch = SeriesResult(view.result.checkpoints, "epoch", log=view.result.log)
    view.finished(by_epoch)
    assert view.axis_label() == "epoch" and view.column_label(0) == "1.0"
    assert next(line for line in view.lines() if line.key == "learning_rate").placement.x[:2] == [0.1, 0.2]
