"""One ledger unit and one rounding: a project's total is exactly the sum of its units'
shares, and every figure printed from them rounds the same way. Pure."""

from __future__ import annotations

import random

from devloop.core.money import from_nano, rounded, spent_words, to_nano, usd


def test_the_units_shares_add_up_to_the_total_exactly_and_print_alike() -> None:
    rng = random.Random(25)
    calls = [(rng.choice("abc"), rng.uniform(0.0001, 0.02)) for _ in range(500)]
    total, shares = 0, dict.fromkeys("abc", 0)
    for unit, cost in calls:  # what the ledger does, call by call
        total += to_nano(cost)
        shares[unit] += to_nano(cost)
    assert sum(shares.values()) == total  # integers: nothing lost however it is added up
    assert usd(from_nano(total)) == usd(from_nano(sum(shares.values())))
    assert abs(from_nano(total) - sum(cost for _, cost in calls)) < 500 / 1e9


def test_rows_rounded_before_they_are_added_make_another_total() -> None:
    # How the CLI said $0.0721 where the report said $0.0720: it added rows it had rounded.
    shares = [to_nano(0.02406), to_nano(0.02406), to_nano(0.0239)]
    rows_first = sum(round(from_nano(share), 4) for share in shares)
    assert f"${rows_first:.4f}" == "$0.0721"
    assert usd(from_nano(sum(shares))) == "$0.0720"  # the ledger's total, rounded once


def test_figures_round_half_up_at_four_decimals() -> None:
    assert usd(0.00005) == "$0.0001" and usd(0.00004999) == "$0.0000"
    assert usd(0.0721, sign=False) == "0.0721" and usd(0) == "$0.0000"
    assert str(rounded(1.23456)) == "1.2346"
    assert to_nano(0.1) + to_nano(0.2) == to_nano(0.3)  # no float drift in the ledger


def test_spend_past_the_cap_says_by_how_much_and_why() -> None:
    assert spent_words(0.0316, None) == "spent $0.0316"
    assert spent_words(0.0316, 0.05) == "spent $0.0316 of $0.0500"
    assert spent_words(0.05, 0.05) == "spent $0.0500 of $0.0500"
    assert spent_words(0.0581, 0.05) == (
        "spent $0.0581 of $0.0500, $0.0081 over: model calls under way when the cap was "
        "reached count too")
    # The amount over is the difference of the figures shown, not of the unrounded ones.
    assert spent_words(0.058149, 0.050051).startswith("spent $0.0581 of $0.0501, $0.0080 over")
