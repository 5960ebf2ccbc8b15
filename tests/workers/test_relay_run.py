"""The stub's relay mode end to end: `devloop run --llm anthropic` pointed at the relay, a
careful model (tests/relay_player.py) reading each request through the reader and
answering through the writer, on the README's quick start: both units pass, `cart` on the
real `money`, within the issue's 14 requests, and nothing a clean run should not show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.relay_player import UnitPlan, play_run
from tests.workers.runproc import SLACK_S
from tests.workers.test_compose import CART, CART_TESTS, MONEY, MONEY_TESTS, quick_start_spec
from tests.workers.test_run_ends import devloop

QUICK_START_MAX_REQUESTS = 14  # issue 29's target (the hand-played run took 33)


def quick_start_plans() -> dict[str, UnitPlan]:
    """What a careful model writes for the quick start; cart's import of money is the line
    the prompt states."""
    cart = CART.replace("from units.money import add, format_cents", "{{uses money}}")
    assert cart != CART
    return {"money": UnitPlan({"code/money.py": MONEY}, {"tests/test_money.py": MONEY_TESTS},
                              note="import it as `from money import add, format_cents`."),
            "cart": UnitPlan({"code/cart.py": cart}, {"tests/test_cart.py": CART_TESTS})}


@pytest.mark.timeout(600)
def test_a_careful_model_through_the_relay_passes_the_quick_start_with_cart_on_money(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    (tmp_path / "spec.yaml").write_text(quick_start_spec())
    folder = tmp_path / "shop"
    made = devloop("new", str(folder), "--from", str(tmp_path / "spec.yaml"), "--no-script")
    assert made.returncode == 0, made.stderr

    model, code, output = play_run(folder, tmp_path / "relay", quick_start_plans(),
                                   420 + SLACK_S)
    assert code == 0, output[-3000:]

    assert model.surprises == [], model.surprises
    assert "2 passed, 0 blocked" in output and "scripted" not in output
    per_unit = model.per_unit()
    assert set(per_unit) == {"money", "cart"}, per_unit
    assert sum(per_unit.values()) <= QUICK_START_MAX_REQUESTS, per_unit
    # cart really uses money: it imports it, and "$2.50" is the real money's formatting.
    assert "from units.money" in (folder / "units/cart/code/cart.py").read_text()
    result = json.loads((folder / "units/cart/runs/run-1-1/result.json").read_text())
    assert result["ok"] and result["summary"]["passed"] == 3, result["summary"]
    # The coder's closing summary reaches the tester's first request, as the reader shows it.
    coder_said = next(s for s in model.seen.values() if s.session_key.startswith("coder.")
                      and s.session_key.endswith(".money") and s.turn == 2)
    tester_first = next(s for s in model.seen.values()
                        if s.session_key.startswith("tester.") and s.session_key.endswith(
                            ".money") and s.since is None)
    shown = json.dumps(tester_first.messages)
    assert "import it as `from money import add, format_cents`." in shown, shown[:2000]
    assert coder_said.seq < tester_first.seq
