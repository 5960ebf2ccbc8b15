"""Reading a fleet run's step records: work, queue waits, overhead per attempt. Pure.

Used by bench/fleet.py (a leading underscore keeps bench/run_all.py from running it).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Any

from devloop.core import dag
from devloop.fleet.records import StepRecord


@dataclass
class Run:
    """What one run left: the records, the graph and the times around them."""

    graph: dict[str, list[str]]
    steps: dict[str, list[StepRecord]]
    test_run_ms: dict[tuple[str, str], int]  # (unit, run id) -> result.json duration_ms
    enqueued_at: float
    finished_at: float
    statuses: dict[str, str]
    cpu_busy: float  # share of all CPUs busy between enqueue and the end (anyone's)
    fleet_cpu_s: float  # CPU seconds of this process tree: workers, Redis, stub (no sandboxes)
    other_cpu_s: float  # CPU seconds of every other process but PID 1
    bench_cpu_s: float  # CPU seconds of this process: the stub server and the poller
    import_s: float


# --- reading the records ----------------------------------------------------------------


def span(r: StepRecord) -> float:
    """Seconds a step held its worker, as recorded (lease taken -> record built)."""
    return r.ended_at - r.started_at


def session_s(r: StepRecord, run: Run) -> float:
    """Seconds of the model session inside a coder or tester step (0 for decide)."""
    if "session_ms" in r.timings:
        return r.timings["session_ms"] / 1000
    ms = float(r.output.get("duration_ms", 0) or 0)
    if r.role == "tester":
        # TesterOutput.duration_ms = session + test run, but run_tests runs inside the session.
        ms -= run.test_run_ms.get((r.msg.unit_id, r.msg.run_id), 0)
    return max(0.0, ms / 1000) if r.role in ("coder", "tester") else 0.0


def step_key(r: StepRecord) -> tuple[str, str, int, int]:
    return (r.msg.unit_id, r.role, r.attempt, r.tester_try)


def worker_of(r: StepRecord) -> str:
    """The pool process that ran the step (`host:pid` of the `host:pid:task` owner)."""
    return ":".join(r.worker.split(":")[:2])


def pickup_waits(flat: list[StepRecord]) -> dict[tuple[str, str, int, int], float]:
    """Per step: seconds from the moment it was sent AND its slot was free, to its start.

    That is the queue wait a free slot could not explain: result store, publish, broker
    hop, decode, step record and lease checks. Counting instead every moment any slot was
    free would charge one idle slot to every queued task at once.
    """
    waits = {}
    by_worker: dict[str, list[StepRecord]] = {}
    for r in flat:
        by_worker.setdefault(worker_of(r), []).append(r)
    for records in by_worker.values():
        free_at = float("-inf")
        for r in sorted(records, key=lambda r: r.started_at):
            ready = max(r.sent_at if r.sent_at is not None else r.started_at, free_at)
            waits[step_key(r)] = max(0.0, r.started_at - ready)
            free_at = r.ended_at
    return waits


def idle_capacity(flat: list[StepRecord], slots: int) -> float:
    """Slot-seconds left idle while steps were waiting: the integral of min(free, queued)."""
    # (time, change in busy, change in queued): sent queues, a start moves it to busy.
    changes = sorted(
        [(r.sent_at or r.started_at, 0, 1) for r in flat]
        + [(r.started_at, 1, -1) for r in flat]
        + [(r.ended_at, -1, 0) for r in flat]
    )
    idle, busy, queued, last = 0.0, 0, 0, changes[0][0] if changes else 0.0
    for t, d_busy, d_queued in changes:
        idle += (t - last) * min(max(0, slots - busy), queued)
        busy, queued, last = busy + d_busy, queued + d_queued, t
    return idle


@dataclass
class Attempt:
    """Orchestration overhead of one unit attempt (coder -> tester -> decide), in seconds."""

    unit: str
    attempt: int
    pickup: float  # queue wait of its steps once a slot was free (see pickup_waits)
    wait_total: float  # queue wait of its steps, free slot or not
    outside_session: float  # coder + tester step time outside the model session
    materialize: float  # recorded by the roles: building the views
    commit: float  # recorded by the roles: committing the views' changes
    decide: float
    release: float  # from the decision that released it to its chain being sent

    @property
    def overhead(self) -> float:
        """The issue's definition: queue wait with a free slot + materialize + commit + decide
        (the release hop counts as queue wait)."""
        return self.pickup + self.materialize + self.commit + self.decide + self.release


def attempts(run: Run) -> list[Attempt]:
    """Every attempt of every unit with its overhead parts."""
    flat = [r for records in run.steps.values() for r in records]
    pickup = pickup_waits(flat)
    decided = {(u, r.attempt): r for u, rs in run.steps.items() for r in rs if r.role == "decide"}
    out = []
    for unit, records in run.steps.items():
        for n in sorted({r.attempt for r in records}):
            mine = [r for r in records if r.attempt == n]
            coder = next((r for r in mine if r.role == "coder"), None)
            if n > 1:
                trigger = decided.get((unit, n - 1))
                released = trigger.ended_at if trigger else None
            else:
                deps = [decided.get((d, max(_attempts(run, d)))) for d in run.graph[unit]]
                released = max((d.ended_at for d in deps if d), default=None)
            sent = coder.sent_at if coder else None
            out.append(
                Attempt(
                    unit=unit,
                    attempt=n,
                    pickup=sum(pickup[step_key(r)] for r in mine),
                    wait_total=sum(r.started_at - r.sent_at for r in mine if r.sent_at),
                    outside_session=sum(
                        span(r) - session_s(r, run) for r in mine if r.role != "decide"
                    ),
                    materialize=sum(r.timings.get("materialize_ms", 0) for r in mine) / 1000,
                    commit=sum(r.timings.get("commit_ms", 0) for r in mine) / 1000,
                    decide=sum(span(r) for r in mine if r.role == "decide"),
                    release=max(0.0, sent - released) if sent and released else 0.0,
                )
            )
    return out


def _attempts(run: Run, unit: str) -> list[int]:
    return [r.attempt for r in run.steps[unit]] or [1]


def _ms(values: list[float], q: float = 0.5) -> float:
    """A quantile of seconds, in milliseconds."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(run: Run, slots: int, config: dict[str, Any]) -> dict[str, Any]:
    """Every number the table prints, and a few more for the JSON."""
    flat = [r for records in run.steps.values() for r in records]
    work = {u: sum(span(r) for r in rs) for u, rs in run.steps.items()}
    total = sum(work.values())
    cp, path = dag.critical_path(run.graph, work)
    makespan = max(r.ended_at for r in flat) - run.enqueued_at
    bound = max(cp, total / slots)
    tries = attempts(run)
    pickup = pickup_waits(flat)
    capacity = (os.cpu_count() or 1) * (run.finished_at - run.enqueued_at)  # CPU-seconds
    by_role = {role: [r for r in flat if r.role == role] for role in ("coder", "tester", "decide")}
    return {
        "config": config,
        "units": len(run.graph),
        "passed": sum(s == "passed" for s in run.statuses.values()),
        "attempts": len(tries),
        "makespan_s": makespan,
        "critical_path_s": cp,
        "critical_path": path,
        "total_work_s": total,
        "work_over_slots_s": total / slots,
        "lower_bound_s": bound,
        "ratio": makespan / bound,
        "overhead_ms": {
            "median": _ms([a.overhead for a in tries]),
            "p90": _ms([a.overhead for a in tries], 0.9),
            "mean": 1000 * statistics.fmean(a.overhead for a in tries),
        },
        "overhead_parts_median_ms": {
            "queue_wait_with_free_slot": _ms([a.pickup for a in tries]),
            "outside_session": _ms([a.outside_session for a in tries]),
            "materialize": _ms([a.materialize for a in tries]),
            "commit": _ms([a.commit for a in tries]),
            "decide": _ms([a.decide for a in tries]),
            "release": _ms([a.release for a in tries]),
        },
        "pickup_median_ms": {
            role: _ms([pickup[step_key(r)] for r in rs]) for role, rs in by_role.items()
        },
        "queue_wait_total_median_ms": _ms([a.wait_total for a in tries]),
        "idle_slot_s_while_queued": idle_capacity(flat, slots),
        "step_median_ms": {role: _ms([span(r) for r in rs]) for role, rs in by_role.items()},
        "session_median_ms": {
            role: _ms([session_s(r, run) for r in by_role[role]]) for role in ("coder", "tester")
        },
        "test_run_median_ms": _ms([ms / 1000 for ms in run.test_run_ms.values()]),
        "import_s": run.import_s,
        "per_attempt_ms": [
            {
                "unit": a.unit,
                "attempt": a.attempt,
                "work": round(1000 * work[a.unit]),
                "pickup": round(1000 * a.pickup),
                "outside_session": round(1000 * a.outside_session),
                "decide": round(1000 * a.decide),
                "release": round(1000 * a.release),
                "queue_wait": round(1000 * a.wait_total),
            }
            for a in tries
        ],
        "cpus": os.cpu_count(),
        "cpu_busy_share": run.cpu_busy,
        "fleet_cpu_s": run.fleet_cpu_s,
        "other_cpu_s": run.other_cpu_s,
        "other_cpu_share": run.other_cpu_s / capacity,
        "fleet_cpu_share": run.fleet_cpu_s / capacity,
        "bench_process_cpu_s": run.bench_cpu_s,
    }
