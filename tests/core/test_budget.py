"""The one work budget: paid for by stored bytes, refused in one line, nesting summed, cancel reached."""

from __future__ import annotations

import pytest

from ckptview.core.budget import FLOOR, MAX_FRAMES, PER_BYTE, Budget, BudgetExceeded
from ckptview.core.errors import Cancelled, CheckpointFormatError
from ckptview.core.jobs import CancelToken


def test_a_budget_is_paid_for_by_the_stored_bytes_with_a_floor() -> None:
    assert Budget.for_stored(10, "x").limit == FLOOR
    assert Budget.for_stored(10 * FLOOR, "x").limit == 10 * FLOOR * PER_BYTE


def test_running_out_is_one_line_naming_what_and_from_how_many_bytes() -> None:
    budget = Budget.for_stored(1900, "the TorchScript code", floor=100, per_byte=0)
    budget.charge(100, "values built")
    with pytest.raises(BudgetExceeded) as caught:
        budget.charge(1, "values built")
    assert isinstance(caught.value, CheckpointFormatError)
    message = str(caught.value)
    assert "\n" not in message and "the TorchScript code" in message and "values built" in message
    assert "1.9 KiB" in message, message
    assert (caught.value.what, caught.value.limit, caught.value.stored) == ("values built", 100, 1900)


def test_frames_of_every_walk_are_summed() -> None:
    budget = Budget.for_stored(0, "x")

    def walk(depth: int) -> None:
        with budget.frame("calls"):
            if depth:
                walk(depth - 1)

    walk(MAX_FRAMES - 1)
    assert budget.depth == 0
    with pytest.raises(BudgetExceeded, match=f"nests deeper than {MAX_FRAMES} levels"):
        walk(MAX_FRAMES)
    assert budget.depth == 0


def test_a_loop_that_charges_is_a_loop_cancel_reaches() -> None:
    token = CancelToken()
    budget = Budget.for_stored(0, "x", cancel=token)
    budget.charge(10)
    token.cancel()
    with pytest.raises(Cancelled):
        for _ in range(FLOOR):
            budget.charge(1)
    assert budget.spent < 10_000
