"""Budgets and stopping, through `devloop run` as a user starts it: a run over its cap
pauses (no session starts after the cap; running ones stop after their turn) and ends with
exit 4; `devloop resume` with a higher cap finishes it from the checkpoints; `devloop
cancel` ends a run with exit 5 and every checkpoint kept."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devloop.console.pages import project_view, summary_view
from devloop.console.render import render
from devloop.core.money import spent_words, to_nano, usd
from devloop.fleet.control import read_control
from devloop.fleet.records import steps_of
from devloop.llm.stub import StubServer
from devloop.report.data import gather
from devloop.report.render import build_report
from devloop.report.tables import cost_table
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.workers.runproc import SLACK_S, RunProcess, clean_env
from tests.workers.test_cli_run import devloop

PID = "p-fleet"
CHAIN = [UnitPlan("a"), UnitPlan("b", ["a"]), UnitPlan("c", ["b"])]
# Runs whose units wait on each other take one worker (a second would only start and
# idle); the spend test keeps two, as its two ready units must run at once.


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def _answered(stub: StubServer) -> list[tuple[str, int]]:
    return [(r.session_key, r.turn) for r in stub.requests if r.status == 200]


def _env(server: RedisServer, stub: StubServer) -> dict[str, str]:
    return clean_env(DEVLOOP_REDIS_URL=server.url, ANTHROPIC_BASE_URL=stub.base_url,
                     ANTHROPIC_API_KEY="test")


@pytest.mark.timeout(420)
def test_a_run_over_its_budget_pauses_and_resume_with_a_higher_cap_finishes_it(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    project = build(tmp_path / "p", CHAIN)
    store = RedisStore(redis_server.client())
    with StubServer(script(CHAIN)) as stub:
        run = RunProcess(project, workers=1, env=_env(redis_server, stub), llm="anthropic",
                         args=["--max-usd", "0.000001"])
        try:
            assert run.start().wait(120 + SLACK_S) == 4, run.output()
            assert "paused: budget" in run.output() and "devloop resume" in run.output()
            control = read_control(store, PID)
            assert control.paused == "budget" and control.spent_usd > 0.000001
            # The first model call crossed the cap: its session ran that turn's tools and
            # stopped before the next; no other session started.
            assert _answered(stub) == [(f"coder.c-test.{PID}.a", 1)]
            checkpoint = store.load_session(PID, "coder", "a")
            assert checkpoint is not None and checkpoint["finished"]
            assert checkpoint["result"]["status"] == "cancelled" and checkpoint["turns"] == 1
            status = json.loads(devloop("status", str(project), "--json",
                                        env={"DEVLOOP_REDIS_URL": redis_server.url}).stdout)
            assert status["paused"] == "budget"
            # The unit the pause stopped mid-session shows so, with how to carry it on.
            assert [u["status"] for u in status["units"]] == ["paused", "pending", "pending"]
            assert "devloop resume" in status["units"][0]["reason"]

            run.command, run.args = "resume", ["--max-usd", "100"]
            assert run.start().wait(240 + SLACK_S) == 0, run.output()
        finally:
            run.close()
        answered = _answered(stub)
    assert [n for n in Counter(answered).values() if n > 1] == []  # no turn asked twice
    assert (f"coder.c-test.{PID}.a", 2) in answered  # the stopped session carried on
    control = read_control(store, PID)
    assert control.paused is None and control.max_usd == 100.0
    assert {store.get_state(PID, u.id).status for u in CHAIN} == {"passed"}


@pytest.mark.timeout(420)
def test_devloop_cancel_ends_the_run_with_every_checkpoint_kept(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    plans = [UnitPlan("a", coder_latency_ms={2: 4000}), UnitPlan("b", ["a"])]
    project = build(tmp_path / "p", plans)
    store = RedisStore(redis_server.client())
    key = f"coder.c-test.{PID}.a"
    with StubServer(script(plans)) as stub:
        env = _env(redis_server, stub)
        run = RunProcess(project, workers=1, env=env, llm="anthropic")
        try:
            run.start()
            run.wait_for("a's coder mid-turn", lambda: any(
                r.session_key == key and r.turn == 2 for r in stub.requests), 120)
            cancelled = devloop("cancel", str(project), env={"DEVLOOP_REDIS_URL":
                                                             redis_server.url})
            assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
            assert "queued task(s) revoked" in cancelled.stdout
            assert run.wait(60 + SLACK_S) == 5, run.output()
            assert "cancelled" in run.output() and "devloop resume" in run.output()
            checkpoint = store.load_session(PID, "coder", "a")
            # The turn in flight when the cancel came ran to its end, then the session
            # stopped with its checkpoint (resumable), before asking the model again.
            assert checkpoint is not None and checkpoint["result"]["status"] == "cancelled"
            assert checkpoint["turns"] == 2 and checkpoint["messages"][-1]["role"] == "user"
            assert max(t for k, t in _answered(stub) if k == key) == 2
            assert store.get_state(PID, "b").status == "pending"

            run.command, run.args = "resume", []
            assert run.start().wait(240 + SLACK_S) == 0, run.output()
        finally:
            run.close()
        answered = _answered(stub)
    assert [n for n in Counter(answered).values() if n > 1] == []
    assert {store.get_state(PID, u.id).status for u in plans} == {"passed"}


@pytest.mark.timeout(300)
def test_a_cancel_while_a_unit_is_blocked_ends_the_run_cancelled_with_exit_5(
    tmp_path: Path
) -> None:
    """The exit codes' precedence (docs/running.md): a person's cancel reads as cancelled (5) even
    when a unit is blocked and no unit can move (the console keeps such a run waiting)."""
    plans = [UnitPlan("stuck", bad=True), UnitPlan("after", ["stuck"])]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    run = RunProcess(project, workers=1, args=["--console"])
    try:
        run.start()
        run.wait_for("the blocked unit", lambda: "needs a human: stuck is blocked" in
                     run.output(), 180 + SLACK_S)
        cancelled = devloop("cancel", str(project), timeout=60)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        assert run.wait(60 + SLACK_S) == 5, run.output()
        assert f"Carry on with `devloop resume {project}`" in run.output()
    finally:
        run.close()


def _figures(text: str) -> set[str]:
    """Every dollar figure a text prints."""
    return set(re.findall(r"\$\d+\.\d{4}", text))


def _agree(project: Path, store: RedisStore, output: str, server: RedisServer) -> float:
    """The ledger's total, once the run's output, `status --json`, the report and the
    console have each been shown to say it (and each unit's share)."""
    control = read_control(store, PID)
    total, cap = control.spent_usd, control.max_usd
    assert sum(map(to_nano, control.unit_spent.values())) == to_nano(total) > 0
    # The end of the run: the live table's spend line, the cost line and the pause (if any)
    # all give the ledger's total; no other total is printed.
    assert f"cost:   {usd(total)} scripted" in output
    assert spent_words(total, cap) in output
    said = {usd(total), *([usd(cap)] if cap is not None else [])}
    over = _figures(spent_words(total, cap)) - said  # the amount past the cap, if any
    assert _figures(output) == said | over, output
    # `status --json`: the same total, each unit's cost its share of it.
    status = json.loads(devloop("status", str(project), "--json",
                                env={"DEVLOOP_REDIS_URL": server.url}).stdout)
    assert status["spent_usd"] == total
    assert {u["unit_id"]: u["cost_usd"] for u in status["units"]} == {
        u["unit_id"]: control.unit_spent.get(u["unit_id"], 0.0) for u in status["units"]}
    # The report, from the folder the run exported.
    rows, cost = cost_table(gather(project))
    assert cost.cost_usd == total and [r.cost_usd for r in rows] == [
        u["cost_usd"] for u in status["units"]]
    assert f"<b>{usd(total)}</b><span>cost, scripted</span>" in build_report(project)
    # The console's page and its live stats.
    assert project_view(store, PID).cost_usd == total
    tally, controls, calls = summary_view(store, PID)
    stats = render("_stats.html.j2", pid=PID, tally=tally, control=controls, calls=calls,
                   target=PID)
    assert f"<b data-spent>{usd(total)}</b>" in stats
    return total


@pytest.mark.timeout(420)
def test_one_spend_figure_everywhere_from_the_ledger_the_cap_is_enforced_against(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # a's first model call takes 15 s; meanwhile b's first two turns reach the cap. a's call
    # was under way: it finishes and counts, and a's session stops before its next turn, so
    # no step record holds what a spent. (A first turn costs about $0.0122 here: it writes
    # the prompt cache; later turns read it, about $0.0017.) b's first answer takes 4 s, so
    # a's call has been sent before the cap is reached, however slowly a's session started.
    plans = [UnitPlan("a", coder_latency_ms={1: 15000}), UnitPlan("b", coder_latency_ms={1: 4000}),
             UnitPlan("c", ["a"])]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    store = RedisStore(redis_server.client())
    run = RunProcess(project, env=clean_env(DEVLOOP_REDIS_URL=redis_server.url),
                     args=["--max-usd", "0.013"])
    try:
        assert run.start().wait(120 + SLACK_S) == 4, run.output()
        total = _agree(project, store, run.output(), redis_server)
        assert total > 0.013  # past the cap, and the run says by how much and why
        assert (f"paused: budget ({spent_words(total, 0.013)}); every session's checkpoint "
                "is kept") in run.output()
        assert "over: model calls under way when the cap was reached count too" in run.output()
        checkpoint = store.load_session(PID, "coder", "a")
        assert checkpoint is not None and checkpoint["turns"] == 1  # under way at the cap
        assert checkpoint["result"]["status"] == "cancelled"
        # What made the figures disagree: the step records leave out the stopped sessions.
        steps = steps_of(store, PID, [p.id for p in plans])
        assert steps["a"] == [] and read_control(store, PID).unit_spent["a"] > 0
        assert to_nano(sum(s.cost_usd for ss in steps.values() for s in ss)) < to_nano(total)

        # Resumed to the end, it still says one figure, the ledger's (both runs' spend).
        run.command, run.args = "resume", ["--max-usd", "100"]
        assert run.start().wait(240 + SLACK_S) == 0, run.output()
        assert _agree(project, store, run.output(), redis_server) > total
    finally:
        run.close()
