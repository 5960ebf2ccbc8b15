"""The console under load: CPU per change with pages open, the updates each page gets, and
what a page weighs, at 1,000, 5,000 and 10,000 units.

Per size, a layered project (layers of 50 units, each depending on 1-3 units of the layer
before: `layered_units`) is imported into a real redis-server and filled the way a run half
way through leaves it: the first half of the layers passed (a coder and a tester step record
each, three timeline entries, a fixed bug every tenth unit), one unit blocked, one waiting
for review, a few coding, the rest pending. A real `devloop console PID` serves it. Then:

- page: the bytes of the project page and of a unit page, and the console's CPU to serve
  each (mean of 10 loads), and the CPU of the first load of the project page (the console
  starts following the project: it reads every unit once);
- drive: PAGES event-stream subscribers (the project page's) stay open while state writes
  arrive at --rate a second for --seconds (pending -> coding -> testing -> passed on the
  next layer, each pass with its step records and timeline entries, as the loop writes
  them); the console process's CPU over the drive, per state write (`CPU per change`:
  one recompute, shared or not, for every page), and the stats updates each page got;
  every page must end showing the final passed count;
- burst: more state writes at once than the events stream keeps (EVENTS_MAXLEN + 1,500
  in one pipeline): every page must recover (a reload, or the right count) within 60 s.

CPU is the console process's user + system time (`/proc`, through psutil), so a busy
machine's wall time does not count. Prints a table with the growth exponent between sizes
and writes bench/out/console.json.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from devloop.core.models import BugOpen, BugTransition
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, save_step
from devloop.ledgers import Timeline
from devloop.ledgers.sink import dumps_line, iso_z, utc_now
from devloop.project.load import load_project
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from devloop.store.keys import EVENTS_MAXLEN

OUT = Path(__file__).resolve().parent / "out" / "console.json"
DEVLOOP = Path(sys.executable).parent / "devloop"
PID = "p-console-bench"
TOKEN = "console-bench-token-0123456789abcdef0123456789"
WIDTH = 50  # units per layer
CONTRACT = {"exports": {"module": {"code/unit.py": {"value()": "-> 42"}}}, "consumes": []}


def layered_units(n: int, seed: int = 27) -> list[dict[str, Any]]:
    """n units in layers of WIDTH, each past the first depending on 1-3 of the layer before."""
    rng = random.Random(seed)
    units: list[dict[str, Any]] = []
    for i in range(n):
        layer = i // WIDTH
        before = [f"u{j:05d}" for j in range((layer - 1) * WIDTH, layer * WIDTH)] if layer else []
        deps = sorted(rng.sample(before, rng.randint(1, 3))) if before else []
        units.append({"id": f"u{i:05d}", "kind": "lib", "depends_on": deps})
    return units


def write_project(root: Path, n: int) -> Path:
    """The project folder: units.json and one SDD file with every unit's section."""
    from devloop.core.contracts import hash_contract

    version = hash_contract(CONTRACT)
    units = [{**u, "contract_hash": version} for u in layered_units(n)]
    root.mkdir(parents=True, exist_ok=True)
    (root / "units.json").write_text(json.dumps(
        {"company_id": "c-bench", "project_id": PID, "stack": "python", "units": units}))
    contract = json.dumps(CONTRACT).replace("&", "&amp;").replace("<", "&lt;").replace(
        ">", "&gt;").replace('"', "&quot;")
    sections = "".join(
        f'<section data-unit-id="{u["id"]}"><pre data-contract>{contract}</pre>'
        "<ul data-acceptance><li>value() returns 42</li></ul></section>\n" for u in units)
    (root / "sdd/mvcp").mkdir(parents=True, exist_ok=True)
    (root / "sdd/mvcp/units.html").write_text(f"<html><body>\n{sections}</body></html>\n")
    return root


def step(unit: str, role: str, attempt: int, ok: bool = True) -> StepRecord:
    """A step record shaped like a real one (a tester's output carries its coverage)."""
    now = time.time()
    msg = StepMsg(pid=PID, unit_id=unit, attempt=attempt)
    output: dict[str, Any] = {"summary": f"{role} of {unit} finished", "run_id": msg.run_id}
    if role == "tester":
        output.update(
            tests_ok=ok, passed=1 if ok else 0, failed=0 if ok else 1,
            failures=[] if ok else [{"test": "tests/test_unit.py::test_value_returns_42",
                                     "expected": 42, "got": 41,
                                     "hint": "value() returned 41 where 42 was expected"}],
            acceptance_coverage={"value() returns 42": ["tests/test_unit.py::test_value"]},
            contract_coverage={"value()": ["tests/test_unit.py::test_value"]},
            coverage={"lines": 1.0, "branches": 1.0, "files": {"code/unit.py": [2, 2]}})
    return StepRecord(role=role, attempt=attempt, msg=msg, worker="bench@host",
                      started_at=now - 20, ended_at=now - 5, tokens=4_000, cost_usd=0.01,
                      status="completed", output=output,
                      timings={"materialize_ms": 12, "session_ms": 14_000, "commit_ms": 3})


def fill(store: RedisStore, n: int) -> list[str]:
    """State as a run half way through leaves it; the pending units of the next layer."""
    ids = [u["id"] for u in layered_units(n)]
    layers = math.ceil(n / WIDTH)
    half = (layers // 2) * WIDTH
    timeline = Timeline(store.sink(PID, "timeline"))
    bugs = store.sink(PID, "bugs")
    passed = UnitState(status="passed", attempt=1, updated_at=time.time())
    for i, unit in enumerate(ids[:half]):
        save_step(store, PID, unit, step(unit, "coder", 1))
        save_step(store, PID, unit, step(unit, "tester", 1))
        timeline.append("unit_coded", unit_id=unit, agent="coder", summary=f"{unit}: value()")
        timeline.append("unit_tested", unit_id=unit, agent="tester", summary="one test")
        timeline.append("loop_pass", unit_id=unit, agent="loop", summary="green on attempt 1")
        if i % 10 == 0:  # written as the ledger writes them (its open() folds them all)
            ts = iso_z(utc_now())
            bugs.append(dumps_line(BugOpen(
                id=f"bug-{unit}", ts=ts, source="unit_test", unit_id=unit, run_id="run-1-1",
                test_name="tests/test_unit.py::test_edge", title="an edge case",
                affected_units=[unit]).to_json_dict()))
            bugs.append(dumps_line(BugTransition(
                id=f"bug-{unit}", ts=ts, to="fixed", by="loop").to_json_dict()))
    store.put_states(PID, dict.fromkeys(ids[:half], passed))
    stuck, review = ids[half], ids[half + 1]
    save_step(store, PID, stuck, step(stuck, "tester", 3, ok=False))
    store.put_state(PID, stuck, UnitState(status="blocked", attempt=3, updated_at=time.time(),
                                          blocked_reason="the same failure 3 times"))
    save_step(store, PID, review, step(review, "tester", 1))
    store.put_state(PID, review, UnitState(status="review", attempt=1, updated_at=time.time()))
    store.put_states(PID, dict.fromkeys(ids[half + 2: half + 8],
                                        UnitState(status="coding", attempt=1)))
    return ids[half + WIDTH: half + 2 * WIDTH] + ids[half + 2 * WIDTH:]


@dataclass
class Subscriber:
    """One page's event stream, read in a thread: what it got, when."""

    port: int
    path: str
    events: dict[str, int] = field(default_factory=dict)
    stats: list[tuple[float, str]] = field(default_factory=list)
    reloads: int = 0
    connected: threading.Event = field(default_factory=threading.Event)
    closed: bool = False
    conn: http.client.HTTPConnection | None = None

    def start(self) -> Subscriber:
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        while not self.closed:
            try:
                self._follow()
            except (OSError, http.client.HTTPException):
                if self.closed:
                    return
                time.sleep(0.5)

    def _follow(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        self.conn.request("GET", self.path, headers={"X-DevLoop-Token": TOKEN,
                                                     "Accept": "text/event-stream"})
        response = self.conn.getresponse()
        assert response.status == 200, response.status
        self.connected.set()
        name, data = "message", []
        for raw in response:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line:
                if data:
                    self._got(name, "\n".join(data))
                name, data = "message", []

    def _got(self, name: str, data: str) -> None:
        self.events[name] = self.events.get(name, 0) + 1
        if name == "reload":
            self.reloads += 1
        if name == "fragment":
            body = json.loads(data)
            if body.get("target") == "stats":
                self.stats.append((time.monotonic(), body["html"]))

    def shown(self, count: str = "passed") -> int | None:
        """A count the page's stats show now (`passed`, `moving`, ...)."""
        if not self.stats:
            return None
        found = re.search(rf'data-count="{count}">(\d+)', self.stats[-1][1])
        return int(found.group(1)) if found else None

    def close(self) -> None:
        self.closed = True
        if self.conn is not None and self.conn.sock is not None:
            with contextlib.suppress(OSError):
                self.conn.sock.shutdown(socket.SHUT_RDWR)


def cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def fetch(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("GET", path, headers={"X-DevLoop-Token": TOKEN})
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, (path, response.status, body[:300])
        return body
    finally:
        conn.close()


def served(proc: psutil.Process, port: int, path: str, loads: int = 10) -> tuple[int, float]:
    """The page's bytes and the console's mean CPU to serve it (over `loads` loads: the
    process clock ticks in 10 ms)."""
    size, before = 0, cpu(proc)
    for _ in range(loads):
        size = len(fetch(port, path))
    return size, (cpu(proc) - before) / loads


@contextlib.contextmanager
def console(url: str) -> Iterator[tuple[psutil.Process, int]]:
    """`devloop console PID` on a free port of 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, "DEVLOOP_REDIS_URL": url, "DEVLOOP_CONSOLE_TOKEN": TOKEN}
    env.pop("DEVLOOP_WEBHOOK_URL", None)
    child = subprocess.Popen([str(DEVLOOP), "console", PID, "--port", str(port)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert child.poll() is None, child.stderr.read() if child.stderr else b""
            assert time.monotonic() < deadline, "the console did not start"
            time.sleep(0.2)
        yield psutil.Process(child.pid), port
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def settle(subs: list[Subscriber], count: str, want: int, timeout_s: float,
           reloads: list[int] | None = None) -> float | None:
    """Seconds until every page shows want for count, or was told to reload since `reloads`
    (None: some page did neither)."""
    start, told = time.monotonic(), reloads or [s.reloads for s in subs]
    while time.monotonic() - start < timeout_s:
        if all(s.shown(count) == want or s.reloads > r for s, r in zip(subs, told, strict=True)):
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def drive(store: RedisStore, frontier: list[str], rate: float, seconds: float) -> int:
    """State writes at rate a second: pending -> coding -> testing -> passed, unit by unit."""
    timeline = Timeline(store.sink(PID, "timeline"))
    writes, start, moves = 0, time.monotonic(), ("coding", "testing", "passed")
    total = int(rate * seconds)
    for n in range(total):
        unit, move = frontier[n // 3], moves[n % 3]
        wait = start + n / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        was = store.get_state(PID, unit)
        if move == "testing":
            save_step(store, PID, unit, step(unit, "coder", 1))
            timeline.append("unit_coded", unit_id=unit, agent="coder", summary="value()")
        elif move == "passed":
            save_step(store, PID, unit, step(unit, "tester", 1))
            timeline.append("loop_pass", unit_id=unit, agent="loop", summary="green")
        new = UnitState(status=move, attempt=1, updated_at=time.time())
        assert store.cas_state(PID, unit, was.status, was.attempt, new)
        writes += 1
    return writes


def burst(store: RedisStore, units: list[str]) -> int:
    """More state writes than the events stream keeps, in one pipeline."""
    count = EVENTS_MAXLEN + 1_500
    states = {}
    for n in range(count):
        states[units[n % len(units)]] = UnitState(status="coding", attempt=1 + n // len(units))
        if len(states) == len(units) or n == count - 1:
            store.put_states(PID, states)
            states = {}
    return count


def measure(n: int, pages: int, rate: float, seconds: float, workdir: Path) -> dict[str, Any]:
    """Every figure for one project size."""
    with RedisServer(workdir / f"redis-{n}") as server:
        store = RedisStore(server.client())
        t0 = time.monotonic()
        store.import_project(load_project(write_project(workdir / f"p{n}", n)))
        frontier = fill(store, n)
        setup_s = time.monotonic() - t0
        passed = sum(1 for s in store.get_states(PID, [u["id"] for u in layered_units(n)])
                     .values() if s.status == "passed")
        with console(server.url) as (proc, port):
            _, first_cpu = served(proc, port, f"/p/{PID}", loads=1)  # starts following it
            page_bytes, page_cpu = served(proc, port, f"/p/{PID}")
            unit_bytes, unit_cpu = served(proc, port, f"/p/{PID}/u/{frontier[0]}")
            subs = [Subscriber(port, f"/p/{PID}/events").start() for _ in range(pages)]
            for sub in subs:
                assert sub.connected.wait(120), "a page's event stream did not open"
            time.sleep(2.0)
            idle0 = cpu(proc)
            time.sleep(3.0)
            idle = (cpu(proc) - idle0) / 3.0
            got0 = [len(s.stats) for s in subs]
            before = cpu(proc)
            writes = drive(store, frontier, rate, seconds)
            passed += writes // 3
            lag = settle(subs, "passed", passed, 120)
            used = cpu(proc) - before
            updates = [len(s.stats) - g for s, g in zip(subs, got0, strict=True)]
            shown = [s.shown() for s in subs]
            told = [s.reloads for s in subs]
            burst_writes = burst(store, frontier[writes // 3 + 1: writes // 3 + 201])
            moving = sum(1 for s in store.get_states(PID, [u["id"] for u in layered_units(n)])
                         .values() if s.status in ("coding", "testing", "waiting_model"))
            recovered = settle(subs, "moving", moving, 60, told)
            reloads = [s.reloads - r for s, r in zip(subs, told, strict=True)]
            for sub in subs:
                sub.close()
    return {
        "units": n, "pages": pages, "setup_s": round(setup_s, 1),
        "first_page_cpu_ms": round(first_cpu * 1000, 1),
        "page_bytes": page_bytes, "page_cpu_ms": round(page_cpu * 1000, 1),
        "unit_page_bytes": unit_bytes, "unit_page_cpu_ms": round(unit_cpu * 1000, 1),
        "idle_cpu_share": round(idle, 3),
        "writes": writes, "drive_s": seconds, "console_cpu_s": round(used, 2),
        "cpu_per_change_ms": round(used / writes * 1000, 1),
        "cpu_per_page_update_ms": round(used / max(1, sum(updates)) * 1000, 1),
        "cpu_share": round(used / (seconds + (lag or 0)), 3),
        "updates_per_page": updates, "passed_expected": passed, "passed_shown": shown,
        "settled_s": None if lag is None else round(lag, 2),
        "burst_writes": burst_writes,
        "burst_recovered_s": None if recovered is None else round(recovered, 2),
        "burst_reloads": reloads,
    }


def exponent(a: dict[str, Any], b: dict[str, Any], key: str) -> float | None:
    if not a[key] or not b[key] or a[key] <= 0 or b[key] <= 0:
        return None
    return math.log(b[key] / a[key]) / math.log(b["units"] / a["units"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--pages", type=int, default=4)
    parser.add_argument("--rate", type=float, default=2.0, help="state writes a second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="devloop-bench-console-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append(measure(n, args.pages, args.rate, args.seconds, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    head = (f"{'units':>6} {'first ms':>8} {'page KB':>8} {'page ms':>8} {'unit KB':>8} "
            f"{'unit ms':>8} "
            f"{'ms/change':>10} {'ms/update':>10} {'core %':>7} {'updates/page':>18} "
            f"{'settled s':>9} "
            f"{'burst':>12}")
    print(head)
    for r in rows:
        burst_said = ("reload" if any(r["burst_reloads"]) else "caught up") if (
            r["burst_recovered_s"] is not None) else "STALE"
        print(f"{r['units']:>6} {r.get('first_page_cpu_ms', r['page_cpu_ms']):>8.0f} "
              f"{r['page_bytes'] / 1024:>8.0f} {r['page_cpu_ms']:>8.1f} "
              f"{r['unit_page_bytes'] / 1024:>8.0f} {r['unit_page_cpu_ms']:>8.1f} "
              f"{r['cpu_per_change_ms']:>10.1f} {r['cpu_per_page_update_ms']:>10.1f} "
              f"{r['cpu_share'] * 100:>7.0f} "
              f"{'/'.join(map(str, r['updates_per_page'])) + ' of ' + str(r['writes']):>18} "
              f"{r['settled_s'] if r['settled_s'] is not None else 'never':>9} {burst_said:>12}")
    for a, b in zip(rows, rows[1:], strict=False):
        growth = {k: exponent(a, b, k) for k in ("cpu_per_change_ms", "cpu_per_page_update_ms",
                                                 "page_cpu_ms",
                                                 "unit_page_cpu_ms", "page_bytes")}
        print(f"{a['units']} -> {b['units']}: " + ", ".join(
            f"{k} N^{v:.2f}" for k, v in growth.items() if v is not None))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
