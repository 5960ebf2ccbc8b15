"""What a unit costs with Claude: tokens measured per unit and per request from the bundled
examples run through `devloop run` against their scripted turns, priced with DevLoop's
price table (devloop/llm/base.py), and projected to the request counts real models took.

What is measured: every request's tokens (the real system prompt, tools, views, upstream
contracts and tool results, counted by the stub at a quarter of their UTF-8 bytes, split
into uncached input, cache writes and cache reads by Anthropic's caching rules) and how
many requests the scripted turns make per unit. What is not: how many requests a real
model makes. That is taken from runs a person played by hand (OBSERVED below) and given
as a range. Prints a table and writes bench/out/unit_cost.json; docs/user-guide.md shows
the cost table `devloop.report.guide.cost_table` renders from `devloop.report.guide.MEASURED`,
which holds what this measured (it says when they differ).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from devloop.llm.base import DEFAULT_PRICES, Usage
from devloop.llm.stub import StubServer
from devloop.report.guide import GUIDE_MODELS, MEASURED, Measured, cost_table

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "unit_cost.json"
EXAMPLES = ("todo", "inventory")


@dataclass
class UnitTokens:
    """One unit's requests and tokens in the scripted run."""

    unit: str
    stack: str
    requests: dict[str, int] = field(default_factory=dict)  # per role
    usage: dict[str, int] = field(default_factory=lambda: Usage().model_dump())
    first_prompt: dict[str, int] = field(default_factory=dict)  # per role: turn 1's prompt
    costs: dict[str, float] = field(default_factory=dict)  # per model

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())


def run_example(name: str, work: Path) -> tuple[str, list[tuple[str, int, Usage]]]:
    """Run one example through `devloop run` against its scripted turns (the stub standing
    in for the API); its stack and each answered request's (session key, turn, usage)."""
    project = work / name
    shutil.copytree(ROOT / "examples" / name, project)
    stack = json.loads((project / "units.json").read_text())["stack"]
    with StubServer(project / "stub.yaml") as stub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEVLOOP_REDIS")}
        env.update(ANTHROPIC_BASE_URL=stub.base_url, ANTHROPIC_API_KEY="bench", COLUMNS="120")
        command = [str(Path(sys.executable).parent / "devloop"), "run", str(project),
                   "--llm", "anthropic", "--workers", "2"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"{name}: devloop run exited {done.returncode}\n{done.stdout}"
                             f"\n{done.stderr}")
        answered = [(r.session_key, r.turn, Usage.model_validate(r.usage))
                    for r in stub.requests if r.status == 200 and r.usage is not None]
    return stack, answered


def per_unit(stack: str, answered: list[tuple[str, int, Usage]]) -> list[UnitTokens]:
    """The requests grouped by unit (a session key is `{role}.{company}.{pid}.{unit}`)."""
    units: dict[str, UnitTokens] = {}
    for key, turn, usage in answered:
        role, unit = key.split(".")[0], key.split(".")[-1]
        row = units.setdefault(unit, UnitTokens(unit, stack))
        row.requests[role] = row.requests.get(role, 0) + 1
        row.usage = (Usage.model_validate(row.usage) + usage).model_dump()
        if turn == 1 and role not in row.first_prompt:
            row.first_prompt[role] = usage.prompt_tokens
    for row in units.values():
        row.costs = {m: DEFAULT_PRICES[m].cost(Usage.model_validate(row.usage))
                     for m in GUIDE_MODELS}
    return list(units.values())


def growth(answered: list[tuple[str, int, Usage]]) -> tuple[float, float]:
    """Mean prompt growth per turn (the turn's output and tool results) and mean output."""
    by_session: dict[str, list[tuple[int, Usage]]] = {}
    for key, turn, usage in answered:
        by_session.setdefault(key, []).append((turn, usage))
    steps, outputs = [], []
    for calls in by_session.values():
        calls.sort(key=lambda c: c[0])
        for (t0, a), (t1, b) in zip(calls, calls[1:], strict=False):
            if t1 == t0 + 1 and b.prompt_tokens > a.prompt_tokens:  # the same conversation
                steps.append(b.prompt_tokens - a.prompt_tokens)
        outputs += [u.output_tokens for _, u in calls]
    return sum(steps) / max(1, len(steps)), sum(outputs) / max(1, len(outputs))


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="devloop-bench-cost-", dir="/var/tmp"))
    try:
        rows: list[UnitTokens] = []
        answered_all: list[tuple[str, int, Usage]] = []
        for name in EXAMPLES:
            stack, answered = run_example(name, work)
            rows += per_unit(stack, answered)
            answered_all += answered
    finally:
        shutil.rmtree(work, ignore_errors=True)
    step, output = growth(answered_all)
    print(f"{'unit':<10} {'stack':<7} {'requests':>8} {'input':>7} {'c.write':>8} "
          f"{'c.read':>8} {'output':>7} {'turn-1 prompt (coder/tester)':>29} "
          + " ".join(f"{m:>17}" for m in GUIDE_MODELS))
    for r in rows:
        u = r.usage
        first = f"{r.first_prompt.get('coder', 0):,} / {r.first_prompt.get('tester', 0):,}"
        print(f"{r.unit:<10} {r.stack:<7} {r.total_requests:>8} {u['input_tokens']:>7,} "
              f"{u['cache_creation_input_tokens']:>8,} {u['cache_read_input_tokens']:>8,} "
              f"{u['output_tokens']:>7,} {first:>29} "
              + " ".join(f"{'$' + format(r.costs[m], '.4f'):>17}" for m in GUIDE_MODELS))
    base = {role: sum(r.first_prompt.get(role, 0) for r in rows) / len(rows)
            for role in ("coder", "tester")}
    measured = Measured(coder_first=round(base["coder"]), tester_first=round(base["tester"]),
                        growth=round(step), output=round(output),
                        scripted_requests=round(sum(r.total_requests for r in rows) / len(rows), 1))
    print(f"\n{measured}")
    print("\n" + cost_table(measured))
    if measured != MEASURED:
        print(f"differs from devloop.report.guide.MEASURED ({MEASURED}): update it and the guide")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "units": [{**asdict(r), "total_requests": r.total_requests} for r in rows],
        "measured": asdict(measured), "cost_table": cost_table(measured),
    }, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
