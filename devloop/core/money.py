"""Dollars as DevLoop counts and prints them: one unit in the ledger, one rounding. Pure.

The ledger counts whole nanodollars (each model call's cost rounded once, as it is added),
so a project's total is exactly the sum of its units' shares however it is added up. Every
figure a person reads goes through `usd`: four decimals, rounded half up.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

NANO = 10**9  # ledger units per dollar
SHOWN = Decimal("0.0001")  # what a printed figure keeps


def to_nano(usd: float) -> int:
    """A model call's cost in dollars as whole nanodollars (the ledger's unit)."""
    return round(usd * NANO)


def from_nano(nano: int) -> float:
    """Nanodollars as dollars: every figure read from the ledger comes through here."""
    return nano / NANO


def rounded(usd: float) -> Decimal:
    """The dollars a person reads: four decimals, half up (the one rounding)."""
    return Decimal(repr(float(usd))).quantize(SHOWN, rounding=ROUND_HALF_UP)


def usd(amount: float, sign: bool = True) -> str:
    """`$0.0581` (or `0.0581` without the sign, under a `cost $` header)."""
    return ("$" if sign else "") + str(rounded(amount))


def spent_words(spent: float, cap: float | None) -> str:
    """`spent $X of $Y`; past the cap, by how much and why that can happen."""
    if cap is None:
        return f"spent {usd(spent)}"
    over = rounded(spent) - rounded(cap)
    if over <= 0:
        return f"spent {usd(spent)} of {usd(cap)}"
    # The cap is checked after each model call and before each turn: the call that reaches
    # it, and the calls other sessions had in flight then, finish and are counted.
    return (f"spent {usd(spent)} of {usd(cap)}, ${over} over: model calls under way when "
            "the cap was reached count too")


def raised_cap(spent: float, cap: float | None) -> str:
    """A cap to carry a budget-paused project on with: twice what was spent (or capped),
    in two significant figures rounded up, as `--max-usd` takes it (`0.12`, `40`)."""
    wanted = Decimal(repr(float(max(spent, cap or 0.0)))) * 2
    if wanted <= 0:
        return "1"
    step = Decimal(1).scaleb(wanted.adjusted() - 1)  # the second significant figure
    value = (wanted / step).to_integral_value(rounding="ROUND_CEILING") * step
    return format(value.normalize(), "f")


def resume_cap(spent: float, cap: float | None, real_spent: float,
               default_cap: float | None) -> str:
    """The `--max-usd` that carries a budget-paused project on: under DevLoop's default cap
    (no person gave one), one default above the real spend; else `raised_cap`."""
    if cap is None and default_cap:
        return str(math.ceil(real_spent + default_cap))
    return raised_cap(spent, cap)
