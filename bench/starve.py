"""Sandbox priority beside busy neighbours: test-run wall time against task pick-up latency.

For each way of weighing sandboxed commands against the rest of the server, and with 0, 1
and 2 busy neighbours (`while :; do :; done`, each in a session of its own at nice 0):

- job: wall time of a sandboxed command needing about 0.45 s of CPU (median of --reps),
  with the CPU wait the sandbox measured;
- pick-up: latency of a worker stand-in (nice 0, its own session, like a Celery worker)
  taking messages a producer pushes through a real redis-server every 20 ms and doing
  3 ms of CPU work with each (decode, start the task), while two sandboxed busy loops
  (two test runs) run at the option's priority: p50 and p99 from push to work done;
- slots: four jobs started at once, with no limit and through two host-wide slots
  (concurrency matched to cores): the wall time each job's limit sees, and the makespan.

Options: the sandbox session's autogroup at nice 19 / 10 / 5 / 0, and (as root, where
a cpu controller is mounted) every sandbox of the host in one cpu cgroup with cpu.shares
1024 or 256 (DEVLOOP_SANDBOX_CPU_SHARES). Prints a table and writes bench/out/starve.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devloop.core.config import load_settings
from devloop.safe.cachedir import cache_root
from devloop.sandbox import BwrapSandbox, new_view_dir
from devloop.sandbox.slots import run_slot
from devloop.sandbox.weight import GROUP
from devloop.server.redis_server import redis_executable

OUT = Path(__file__).resolve().parent / "out" / "starve.json"
CPU_V1 = Path("/sys/fs/cgroup/cpu")
JOB = "python3 -c 'x = 0\nfor i in range(10**7): x += i'"
PICKUP_S = 4.0


@dataclass(frozen=True)
class Option:
    """One way to weigh sandboxes: an autogroup nice, or a shared cpu cgroup's shares."""

    name: str
    nice: int
    shares: int | None = None


OPTIONS = [
    Option("autogroup nice 19", 19),
    Option("autogroup nice 10", 10),
    Option("autogroup nice 5", 5),
    Option("autogroup nice 0", 0),
    Option("cgroup cpu.shares 1024", 0, 1024),
    Option("cgroup cpu.shares 256", 0, 256),
]


# --- the child: runs sandboxed commands under one option --------------------------------


def child(option: Option, command: str, copies: int, slots: int, timeout_s: float) -> None:
    """Run `copies` sandboxed commands at once; print one JSON line per command."""
    settings = load_settings().model_copy(
        update={"sandbox_nice": option.nice, "sandbox_cpu_shares": option.shares or 0}
    )
    sandbox = BwrapSandbox(settings)
    view = new_view_dir(settings, prefix="bench-starve-")
    results: list[dict[str, Any]] = []
    slot_dir = Path(tempfile.mkdtemp(prefix="bench-slots-", dir=cache_root(settings)))
    slot_dir.chmod(0o755)

    def one() -> None:
        started = time.monotonic()
        with contextlib.ExitStack() as stack:
            if slots:
                stack.enter_context(run_slot(slot_dir, slots))
            obs = sandbox.run(command, view=view, cwd=".", writable=[], timeout_s=timeout_s)
        results.append({"wall_s": obs.duration_ms / 1000, "cpu_s": obs.cpu_s,
                        "wait_s": obs.wait_s, "done_s": time.monotonic() - started})

    try:
        threads = [threading.Thread(target=one) for _ in range(copies)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        shutil.rmtree(view, ignore_errors=True)
        shutil.rmtree(slot_dir, ignore_errors=True)
    for result in results:
        print(json.dumps(result))


def in_child(
    option: Option, command: str, copies: int = 1, slots: int = 0, timeout_s: float = 300
) -> list[dict[str, Any]]:
    """Run `child` in a process of its own (so a cgroup option moves only it)."""
    argv = [sys.executable, __file__, "--child", option.name, "--command", command,
            "--copies", str(copies), "--slots", str(slots), "--timeout", str(timeout_s)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


# --- the parent: neighbours, a worker stand-in, the table --------------------------------


@contextlib.contextmanager
def busy(count: int) -> Iterator[None]:
    """`count` busy neighbours, each in a session (an autogroup) of its own at nice 0."""
    procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
             for _ in range(count)]
    try:
        time.sleep(0.2)
        yield
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# Takes each message and does about 3 ms of CPU work with it (a Celery worker decoding
# and starting a task); the latency runs from the push to the end of that work.
CONSUMER = """
import sys, time, redis
r = redis.Redis(unix_socket_path=sys.argv[1])
lat, end = [], time.time() + float(sys.argv[2])
while time.time() < end:
    got = r.blpop("q", timeout=1)
    if got:
        spin = time.thread_time() + 0.003
        while time.thread_time() < spin:
            pass
        r.set("last", got[1])
        lat.append((time.time() - float(got[1])) * 1000)
print(" ".join(f"{x:.3f}" for x in lat))
"""
PRODUCER = """
import sys, time, redis
r = redis.Redis(unix_socket_path=sys.argv[1])
end = time.time() + float(sys.argv[2])
while time.time() < end:
    r.lpush("q", repr(time.time()))
    time.sleep(0.02)
"""


def pickup(option: Option, socket: Path) -> tuple[float, float]:
    """p50 and p99 ms of the worker stand-in taking messages while two sandboxes spin."""
    spin = f"timeout {PICKUP_S + 2:g} sh -c 'while :; do :; done'"
    loops = threading.Thread(target=in_child, args=(option, spin, 2, 0, 60))
    loops.start()
    time.sleep(0.5)
    secs = str(PICKUP_S)
    consumer = subprocess.Popen([sys.executable, "-c", CONSUMER, str(socket), secs],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, str(socket), secs],
                                start_new_session=True)
    out, _ = consumer.communicate()
    producer.wait()
    loops.join()
    lat = sorted(float(x) for x in out.split())
    if not lat:
        return float("nan"), float("nan")
    return statistics.median(lat), lat[min(len(lat) - 1, int(0.99 * len(lat)))]


@contextlib.contextmanager
def redis_socket() -> Iterator[Path]:
    """A redis-server on a unix socket, in a session of its own at nice 0."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    sock = tmp / "redis.sock"
    proc = subprocess.Popen(
        [redis_executable(), "--port", "0", "--unixsocket", str(sock), "--save", "",
         "--appendonly", "no", "--dir", str(tmp)],
        stdout=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield sock
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def shares_kept() -> Iterator[None]:
    """Put the host's sandbox group back to the weight it had (the options change it)."""
    shares = CPU_V1 / GROUP / "cpu.shares"
    before = shares.read_text() if shares.exists() else None
    try:
        yield
    finally:
        if before is not None:
            shares.write_text(before)


def usable(option: Option) -> bool:
    return option.shares is None or (os.geteuid() == 0 and (CPU_V1 / "cpu.shares").exists())


def measure(reps: int, neighbours: list[int], options: list[Option]) -> list[dict[str, Any]]:
    """Every option beside every neighbour count."""
    rows = []
    with redis_socket() as sock:
        for option in options:
            if not usable(option):
                continue
            with shares_kept():
                for count in neighbours:
                    with busy(count):
                        jobs = [in_child(option, JOB)[0] for _ in range(reps)]
                        p50, p99 = pickup(option, sock)
                        free = in_child(option, JOB, copies=4)
                        slotted = in_child(option, JOB, copies=4, slots=2)
                    rows.append({
                        "option": option.name, "neighbours": count,
                        "job_s": statistics.median(j["wall_s"] for j in jobs),
                        "job_wait_s": statistics.median(j["wait_s"] for j in jobs),
                        "pickup_p50_ms": p50, "pickup_p99_ms": p99,
                        "four_free_job_s": max(j["wall_s"] for j in free),
                        "four_free_makespan_s": max(j["done_s"] for j in free),
                        "four_slotted_job_s": max(j["wall_s"] for j in slotted),
                        "four_slotted_makespan_s": max(j["done_s"] for j in slotted),
                    })
                    print(table_row(rows[-1]), flush=True)
    return rows


HEADER = (
    "| option | busy neighbours | job wall s (wait s) | pick-up p50 / p99 ms "
    "| 4 jobs at once: slowest job s / makespan s | through 2 slots: slowest job s / makespan s |"
)


def table_row(r: dict[str, Any]) -> str:
    return (
        f"| {r['option']} | {r['neighbours']} | {r['job_s']:.2f} ({r['job_wait_s']:.2f}) "
        f"| {r['pickup_p50_ms']:.1f} / {r['pickup_p99_ms']:.1f} "
        f"| {r['four_free_job_s']:.2f} / {r['four_free_makespan_s']:.2f} "
        f"| {r['four_slotted_job_s']:.2f} / {r['four_slotted_makespan_s']:.2f} |"
    )


def main() -> None:
    """Measure, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--neighbours", default="0,1,2")
    parser.add_argument("--options", default=",".join(o.name for o in OPTIONS))
    parser.add_argument("--child")
    parser.add_argument("--command")
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--slots", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    by_name = {o.name: o for o in OPTIONS}
    if args.child:
        child(by_name[args.child], args.command, args.copies, args.slots, args.timeout)
        return
    chosen = [by_name[n] for n in args.options.split(",")]
    print(HEADER)
    print("|" + "---|" * 6)
    rows = measure(args.reps, [int(n) for n in args.neighbours.split(",")], chosen)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
