"""Failure paths of the loop, carried by the library's own steps (no Celery): who is retried,
how bugs move, and how an outage or a step that raises ends."""

from __future__ import annotations

from pathlib import Path

from devloop.core.config import Settings
from devloop.fleet.dispatch import resume_blocked
from devloop.fleet.records import steps_of
from devloop.ledgers import BugLedger, Timeline, parse_coder_log
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.chain import chains


def coder_log(store: RedisStore, pid: str, unit: str) -> list[int]:
    raw = store.unit_files(pid, unit).files.get("coder.log", b"").decode()
    return [d.attempt for d in parse_coder_log(raw)]


def timeline_kinds(store: RedisStore, pid: str, unit: str) -> list[str]:
    return [e.kind for e in Timeline(store.sink(pid, "timeline")).events() if e.unit_id == unit]


def test_a_tester_self_check_failure_retries_the_tester_with_a_real_model_call(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # Try 1 tests a mock of value() (green, but its self-check refuses it); try 2 tests it.
    plans = [UnitPlan("u", tester=["mock", "proper"])]
    with chains(redis_store, settings, build(tmp_path / "p", plans), script(plans)) as c:
        c.run()
    state = redis_store.get_state(c.pid, "u")
    assert (state.status, state.attempt) == ("passed", 1)
    assert coder_log(redis_store, c.pid, "u") == [1]  # the coder was never sent back
    # Try 1 is turns 1-6 of the tester's conversation; try 2 got model turns of its own.
    assert c.requests("tester.") == [(n, 200) for n in range(1, 11)]
    testers = [(r.tester_try, r.outcome and r.outcome.status, r.tokens > 0)
               for r in steps_of(redis_store, c.pid, ["u"])["u"] if r.role == "tester"]
    assert testers == [(1, "failed", True), (2, "completed", True)]
    assert b"patch(" not in redis_store.unit_files(c.pid, "u").files["tests/test_unit.py"]


def test_a_red_run_the_tests_own_set_up_broke_goes_back_to_the_tester_not_the_coder(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # Try 1 asks for pytest-mock's `mocker`, which the sandbox lacks; try 2 tests value().
    plans = [UnitPlan("u", tester=["mocker", "proper"])]
    with chains(redis_store, settings, build(tmp_path / "p", plans), script(plans)) as c:
        c.run()
    state = redis_store.get_state(c.pid, "u")
    assert (state.status, state.attempt) == ("passed", 1)
    assert coder_log(redis_store, c.pid, "u") == [1]  # the coder was never sent back
    records = steps_of(redis_store, c.pid, ["u"])["u"]
    first = next(r for r in records if r.role == "tester" and r.tester_try == 1)
    assert first.outcome is not None and str(first.outcome.setup_fault).startswith(
        "the tests' own set-up failed: `tests/test_unit.py::test_value_returns_42` asks for "
        "fixture `mocker`, but it comes from the plugin pytest-mock, which is not installed")
    decided = [r.status for r in records if r.role == "decide"]
    assert decided == ["retry_tester", "pass"]


def test_bugs_go_open_then_fixing_by_the_loop_then_fixed_by_a_green_run(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    plans = [UnitPlan("u", coder=["bad", "good"])]
    with chains(redis_store, settings, build(tmp_path / "p", plans), script(plans)) as c:
        c.run()
    assert redis_store.get_state(c.pid, "u").status == "passed"
    [bug] = BugLedger(redis_store.sink(c.pid, "bugs")).list(unit_id="u")
    assert (bug.status, bug.severity, bug.run_id) == ("fixed", "medium", "run-1-1")
    moves = [(t.to, t.by, (t.model_extra or {}).get("attempt"), t.fix_refs) for t in bug.history]
    assert moves == [("fixing", "loop", 2, []), ("fixed", "tester", None, ["run-2-1"])]


def test_a_model_outage_waits_as_waiting_model_then_resumes_with_a_real_call(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # The provider tries each call 5 times: turn 1 fails all of them once, then answers.
    plans = [UnitPlan("u", coder_faults={1: {"kind": "overloaded", "times": 5}})]
    with chains(redis_store, settings, build(tmp_path / "p", plans), script(plans),
                model_retry_base_s=0.5, retry_max_s=1, model_wait_total_s=120) as c:
        c.run()
    [(why, waiting)] = c.waits
    assert waiting.status == "waiting_model" and waiting.attempt == 1
    assert "HTTP 529" in (waiting.last_error or "")
    assert "Overloaded" in why and "resume in 0.5 s" in why
    assert waiting.extra["model_waits"] == 1
    assert [status for turn, status in c.requests("coder.") if turn == 1] == [529] * 5 + [200]
    state = redis_store.get_state(c.pid, "u")
    assert (state.status, state.attempt, state.last_error) == ("passed", 1, None)
    assert "waiting_since" not in state.extra
    assert "loop_wait" in timeline_kinds(redis_store, c.pid, "u")


def test_a_model_outage_longer_than_the_total_blocks_the_unit_and_can_be_resumed(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    plans = [UnitPlan("down", coder_faults={1: {"kind": "overloaded", "times": 10**6}}),
             UnitPlan("after", ["down"])]
    with chains(redis_store, settings, build(tmp_path / "p", plans), script(plans),
                model_retry_base_s=0.2, retry_max_s=0.5, model_wait_total_s=2) as c:
        c.run()
        assert c.waits and all(w.status == "waiting_model" for _, w in c.waits)
        # Each wait ended in a real call: 5 tries per round, every round.
        rounds = [s for t, s in c.requests("coder.") if t == 1]
        assert rounds == [529] * 5 * (len(c.waits) + 1)
        down = redis_store.get_state(c.pid, "down")
        assert down.status == "blocked" and down.attempt == 1
        assert (down.blocked_reason or "").startswith("model unavailable: ")
        assert "HTTP 529" in (down.last_error or "")
        assert redis_store.get_state(c.pid, "after").status == "blocked_upstream"
        # The next run resumes it: the same attempt, its dependents waiting for it again.
        [again] = resume_blocked(redis_store, c.pid)
        assert (again.msg.unit_id, again.msg.attempt) == ("down", 1)
        assert redis_store.get_state(c.pid, "down").status == "coding"
        assert redis_store.get_state(c.pid, "after").status == "pending"


def test_an_exception_in_a_step_is_retried_then_blocks_the_unit_with_its_error(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    plans = [UnitPlan("broken"), UnitPlan("fine")]
    project = build(tmp_path / "p", plans)
    with chains(redis_store, settings, project, script(plans),
                step_retries=2, step_retry_base_s=0.1) as c:
        # A checkpoint nobody can read: every start of the coder step raises.
        redis_store.client.set(redis_store.keys(c.pid).session("coder", "broken"), b"{oops")
        c.run()
    broken = redis_store.get_state(c.pid, "broken")
    assert (broken.status, broken.attempt) == ("blocked", 1)
    assert (broken.last_error or "").startswith("JSONDecodeError: ")
    assert broken.blocked_reason == f"infrastructure: {broken.last_error}"
    assert broken.failure_signature is None  # not counted as the code's failure
    assert [w.extra["step_failures"] for _, w in c.waits] == [1, 2]
    kinds = timeline_kinds(redis_store, c.pid, "broken")
    assert kinds.count("loop_retry_step") == 2 and kinds[-1] == "loop_block"
    assert redis_store.get_state(c.pid, "fine").status == "passed"


def test_once_the_model_api_refuses_devloop_no_step_starts_and_the_cause_stays_on_the_unit(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # The refusal is served once: a step that ran after it would pass and wipe the cause.
    plans = [UnitPlan("u", coder_faults={1: {"kind": "authentication", "times": 1}})]
    with chains(redis_store, settings, build(tmp_path / "p", plans), script(plans)) as c:
        c.run()
        [refused] = c.stopped
        assert "HTTP 401" in refused
        c.run()  # a redelivery of the same message, as reconcile or Celery would send it
    assert len(c.stopped) == 2 and "not started: the model API refused" in c.stopped[1]
    assert c.requests("coder.") == [(1, 401)]  # no model call after the refusal
    state = redis_store.get_state(c.pid, "u")
    assert state.attempt == 1 and "the model API refused" in (state.last_error or "")


def test_a_request_the_api_refuses_as_invalid_blocks_the_unit_as_infrastructure_spending_nothing(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    plans = [UnitPlan("u", coder_faults={1: {"kind": "invalid_request", "times": 10**6}})]
    with chains(redis_store, settings, build(tmp_path / "p", plans), script(plans),
                step_retries=2, step_retry_base_s=0.1) as c:
        c.run()
    state = redis_store.get_state(c.pid, "u")
    assert (state.status, state.attempt, state.failure_signature) == ("blocked", 1, None)
    assert state.extra["block_kind"] == "infrastructure"
    reason = state.blocked_reason or ""
    assert reason.startswith("infrastructure: the model API refused the coder's request as "
                             "invalid (session 'coder.c-test.p-fleet.u', HTTP 400: ")
    assert "messages.1.content.0.tool_use.input: Input should be a valid dictionary" in reason
    assert coder_log(redis_store, c.pid, "u") == []  # the coder was never sent back
    assert [s for _, s in c.requests("coder.")] == [400] * 3  # the step, then two retries
    assert state.last_hint is None  # nothing offered to the coder
