"""The one work budget: paid for by stored bytes, refused in one line, nesting summed, cancel reached."""

from __future__ import annotations

import pytest

from ckptview.core.budget import (
    FLOOR,
    JSON_VALUE,
    MAX_FRAMES,
    PER_BYTE,
    SOURCE_TOKEN,
    Budget,
    BudgetExceeded,
    json_units,
    source_units,
)
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


def test_a_level_refused_is_not_left_and_the_refusal_names_it() -> None:
    budget = Budget.for_stored(0, "the code")
    for _ in range(MAX_FRAMES):
        budget.enter("a call")
    with pytest.raises(BudgetExceeded, match=r"the code nests deeper than 200 levels in all \(down to an expr"):
        budget.enter("an expression")
    assert budget.depth == MAX_FRAMES
    for _ in range(MAX_FRAMES):
        budget.leave()
    assert budget.depth == 0


def test_parse_costs_are_counted_from_the_bytes_before_parsing() -> None:
    assert json_units(b"[[],[],[]]") == 7 * JSON_VALUE  # six values after a `[` or `,`, and the first
    assert json_units(b'"' + b"x" * 160 + b'"') == JSON_VALUE + 10  # one value; its text, a unit per 16 bytes
    assert source_units(b"a;a;a") == 5 * SOURCE_TOKEN
    assert source_units(b"__torch__.torch.linear(x, w)") == 10 * SOURCE_TOKEN + 1  # names, dots, brackets


def test_a_refusal_may_carry_what_was_found_before_it() -> None:
    budget = Budget.for_stored(0, "the pickles", floor=10)
    with pytest.raises(BudgetExceeded) as caught:
        budget.charge(11, "pickles begun")
    noted = caught.value.noting("; it names os.system")
    assert str(noted).endswith("refused; it names os.system") and noted.what == "pickles begun"
