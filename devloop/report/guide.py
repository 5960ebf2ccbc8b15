"""Tables the user guide (docs/user-guide.md) shows, rendered from what they describe: the
stacks' toolchain pins, the sandbox's limits, the price table and the cost formula. Pure but
for reading the toolchain files; tests/test_guide.py checks the guide holds each as rendered.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devloop.core.config import Settings
from devloop.llm.base import DEFAULT_PRICES, Price
from devloop.project.resources import data_dir
from devloop.project.toolchain import BASE_PYTHON
from devloop.runners.base import TIMEOUT_S
from devloop.sandbox.base import default_limits

# What each pinned package is for. A package pinned without a line here fails the guide's
# test: the guide must say what every package a unit may use is for.
PURPOSE = {
    "pytest": "runs the tests (tests may import `pytest`)",
    "coverage": "measures line and branch coverage of `code/` (the runner's, not for tests)",
    "@babel/parser": "DevLoop's own parsing of the unit's scripts (exports, hollow builds)",
    "@vitejs/plugin-vue": "compiles `.vue` single-file components for vitest",
    "@vitest/coverage-v8": "measures coverage of `code/` (the runner's)",
    "@vue/test-utils": "`mount`, `setValue`, `trigger` in tests of `.vue` components",
    "better-sqlite3": "SQLite, synchronous (`require('better-sqlite3')`, `:memory:`)",
    "express": "HTTP routes (`code/server.js` exports the app and does not listen)",
    "jsdom": "the DOM for component tests (used when a unit has `.vue` files)",
    "supertest": "HTTP requests against an Express app in tests, no port needed",
    "vite": "vitest's transform pipeline (with the vue plugin)",
    "vitest": "runs the tests (`describe`, `it`, `expect`, `vi` as globals or imported)",
    "vue": "Vue 3 (`<script setup>`, Composition API)",
}
# The models the guide prices a unit with.
GUIDE_MODELS = ("claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-4-8")


def python_pins() -> dict[str, str]:
    """The python stack's test venv: package -> pinned version (requirements.txt)."""
    pins = {}
    for line in (data_dir("toolchains") / "python" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip()] = version.strip()
    return pins


def node_pins() -> dict[str, str]:
    """The node toolchain: package -> pinned version (package.json)."""
    manifest = json.loads((data_dir("toolchains") / "node" / "package.json").read_text())
    return dict(manifest["dependencies"])


def node_locked() -> int:
    """How many packages the node toolchain's lock installs in all (theirs included)."""
    lock = json.loads((data_dir("toolchains") / "node" / "package-lock.json").read_text())
    return sum(1 for path in lock["packages"] if path)


def packages_table() -> str:
    """Markdown: per stack, every package a unit's code and tests run with, its pin and use."""
    rows = ["| stack | package | version | for |", "|---|---|---|---|",
            f"| python | the standard library | the worker's `{BASE_PYTHON}` | everything "
            "`code/` needs unless its SDD says otherwise |"]
    rows += [f"| python | `{name}` | {version} | {PURPOSE[name]} |"
             for name, version in python_pins().items()]
    rows.append("| node | node's built-in modules (`fs`, `http`, `crypto`, ...) | the worker's "
                "`node` (20) | |")
    rows += [f"| node | `{name}` | {version} | {PURPOSE[name]} |"
             for name, version in node_pins().items()]
    rows.append(f"| node | what those depend on | {node_locked()} packages in all, locked | "
                "they resolve (`require('body-parser')`), but only the pins above are "
                "promised |")
    return "\n".join(rows) + "\n"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


def limits_table(settings: Settings | None = None) -> str:
    """Markdown: the limits a unit's commands, files and sessions run under, by default."""
    s = settings or Settings()
    lim = default_limits(s)
    rows = [
        ("one command (Bash, a build)", f"{s.command_timeout_s:g} s of CPU or of the time the "
         "machine gave it, 3x that in wall time at most", "`DEVLOOP_COMMAND_TIMEOUT_S`"),
        ("one test run (`run_tests`, the tester's Bash)", f"{TIMEOUT_S:g} s, the same way",
         "the tester spec's limit"),
        ("processes and threads of one command", f"{lim.processes}",
         "`DEVLOOP_SANDBOX_PROCESSES`"),
        ("memory of one command, all its processes and `/tmp` together (where the worker "
         "may make a cgroup: `devloop sandbox limits` says)", _size(lim.memory_bytes),
         "`DEVLOOP_SANDBOX_MEMORY_MB`"),
        ("writable memory per process", _size(lim.data_bytes), "fixed"),
        ("one file written", _size(lim.file_bytes), "fixed"),
        ("`/tmp` (a private tmpfs)", _size(lim.tmp_bytes), "fixed"),
        ("stdout and stderr of a command", f"{_size(s.output_cap_bytes)} each, the rest cut",
         "`DEVLOOP_OUTPUT_CAP_BYTES`"),
        ("a unit's files together", _size(s.file_cap_bytes), "`DEVLOOP_FILE_CAP_BYTES`"),
        ("files and directories in a unit", f"{s.unit_max_files:,}",
         "`DEVLOOP_UNIT_MAX_FILES`"),
        ("a session (one attempt of one role)", f"{s.session_max_turns} turns, "
         f"{s.session_max_tokens:,} tokens, ${s.session_max_usd:g}, "
         f"{s.session_max_wall_s / 60:g} min", "`DEVLOOP_SESSION_MAX_*`"),
        ("attempts per unit", f"{s.retry_budget}", "`DEVLOOP_RETRY_BUDGET`"),
    ]
    lines = ["| what | limit | set by |", "|---|---|---|"]
    lines += [f"| {what} | {limit} | {knob} |" for what, limit, knob in rows]
    return "\n".join(lines) + "\n"


def price_table() -> str:
    """Markdown: DevLoop's built-in prices, dollars per million tokens."""
    lines = ["| model | input | output | cache write | cache read |", "|---|---|---|---|---|"]
    for model, p in DEFAULT_PRICES.items():
        lines.append(f"| `{model}` | {p.input:g} | {p.output:g} | {p.cache_write:g} | "
                     f"{p.cache_read:g} |")
    return "\n".join(lines) + "\n"


def session_cost(price: Price, first: float, growth: float, output: float,
                 requests: float) -> float:
    """Dollars for one session of `requests` model calls whose first prompt is `first`
    tokens, each later one `growth` tokens longer (the last turn's output and tool results),
    `output` tokens out per call, with the prompt cache working as DevLoop asks it to: the
    first call writes its prompt to the cache, each later one reads what the call before
    sent and writes what is new."""
    n = max(0.0, requests)
    if n == 0:
        return 0.0
    written = first + (n - 1) * growth
    read = (n - 1) * first + growth * (n - 1) * (n - 2) / 2
    return (written * price.cache_write + read * price.cache_read
            + n * output * price.output) / 1_000_000


@dataclass(frozen=True)
class Measured:
    """Prompt sizes measured from the examples' scripted runs (bench/unit_cost.py)."""

    coder_first: int  # tokens of a coder session's first prompt: system, tools, first turn
    tester_first: int
    growth: int  # tokens each turn adds to the conversation (output and tool results)
    output: int  # tokens the model writes per turn
    scripted_requests: float  # requests per unit in the scripted runs (both roles)


# bench/unit_cost.py (both examples, 7 units); re-measure and update it together with the
# guide, whose test renders the cost table from these.
MEASURED = Measured(coder_first=3502, tester_first=3906, growth=397, output=155,
                    scripted_requests=11.6)
# Requests per unit beyond the scripted run's: runs a person played the model by hand
# (issue 25: a 2-unit python project took 33 requests, a 3-unit node project 19).
BY_HAND = {"node": 19 / 3, "python": 33 / 2}
# Output tokens per turn of a model that writes whole files (an assumption: the scripted
# turns write small stand-ins, 155 a turn).
WRITING = 600


def unit_cost(price: Price, requests: float, output: float | None = None,
              m: Measured = MEASURED) -> float:
    """One unit's dollars at `requests` calls, split evenly between a coder and a tester
    session, at the measured prompt sizes (and `output` tokens a turn, else the measured)."""
    half, out = requests / 2, m.output if output is None else output
    return (session_cost(price, m.coder_first, m.growth, out, half)
            + session_cost(price, m.tester_first, m.growth, out, half))


def predicted_tokens(requests: float, m: Measured = MEASURED) -> float:
    """Tokens in and out of one unit at `requests` calls, at the measured sizes."""
    n = requests / 2  # per session
    per_session = [n * first + m.growth * n * (n - 1) / 2 + n * m.output
                   for first in (m.coder_first, m.tester_first)]
    return sum(per_session)


def cost_cases(m: Measured = MEASURED) -> list[tuple[str, float, float]]:
    """(what, requests per unit, output tokens per turn), from the least to a runaway's pace."""
    budget = Settings().retry_budget
    py = BY_HAND["python"]
    return [
        ("the examples' scripted runs", m.scripted_requests, m.output),
        ("node, played by hand", BY_HAND["node"], m.output),
        ("python, played by hand", py, m.output),
        (f"python by hand, {WRITING} output tokens a turn", py, WRITING),
        (f"all {budget} attempts at that pace", py * budget, WRITING),
    ]


def cost_table(m: Measured = MEASURED) -> str:
    """Markdown: a unit's estimated dollars per model, from few requests to a retry-heavy
    unit, and how many such units the default project cap pays for on the first model."""
    cap = Settings().project_max_usd
    head = ("| requests per unit | " + " | ".join(f"`{x}`" for x in GUIDE_MODELS)
            + f" | units in the default ${cap:g} (`{GUIDE_MODELS[0]}`) |")
    lines = [head, "|---|" + "---|" * (len(GUIDE_MODELS) + 1)]
    first: list[float] = []
    for label, requests, output in cost_cases(m):
        costs = [unit_cost(DEFAULT_PRICES[x], requests, output, m) for x in GUIDE_MODELS]
        cells = [f"${c:.2f}" for c in costs] + [f"{math.floor(cap / costs[0]):,}"]
        lines.append(f"| {requests:.1f} ({label}) | " + " | ".join(cells) + " |")
        first.append(costs[0])
    *passing, heavy = first
    lines += ["", f"So expect about ${min(passing):.2f} to ${max(passing):.2f} a unit on "
              f"`{GUIDE_MODELS[0]}` for a unit that passes at the pace above, and up to "
              f"${heavy:.2f} for one that spends its whole retry budget."]
    return "\n".join(lines) + "\n"


def runaway_words(settings: Settings | None = None) -> str:
    """What one unit may spend when only the session caps stop it, against the default."""
    s = settings or Settings()
    most = s.retry_budget * 2 * s.session_max_usd
    return (f"The session caps alone let one unit spend {s.retry_budget} attempts x a coder "
            f"and a tester session x ${s.session_max_usd:g} = ${most:g} (more with tester "
            f"sessions run again), {most / s.project_max_usd:g} times the default project "
            f"cap of ${s.project_max_usd:g}.\n")


GENERATED: dict[str, Callable[[], str]] = {
    "packages": packages_table, "limits": limits_table, "prices": price_table,
    "costs": cost_table, "runaway": runaway_words,
}


def _filled(rendered: str) -> Callable[[re.Match[str]], str]:
    """A substitution keeping a block's markers around `rendered`."""
    return lambda m: m.group(1) + rendered + m.group(3)


def refresh(text: str) -> str:
    """`text` with each block between `<!-- generated: NAME ... -->` and `<!-- end -->`
    rendered now (ValueError: a block is missing or doubled)."""
    for name, render in GENERATED.items():
        block = re.compile(rf"(<!-- generated: {name}\b[^>]*-->\n)(.*?)(<!-- end -->)", re.S)
        text, found = block.subn(_filled(render()), text)
        if found != 1:
            raise ValueError(f"docs/user-guide.md: {found} blocks `<!-- generated: {name}`; "
                             "fix: keep exactly one")
    return text


def guide_path() -> Path:
    """docs/user-guide.md in a checkout."""
    return Path(__file__).resolve().parent.parent.parent / "docs" / "user-guide.md"


if __name__ == "__main__":  # python -m devloop.report.guide: render the guide's tables in place
    guide_path().write_text(refresh(guide_path().read_text()))
