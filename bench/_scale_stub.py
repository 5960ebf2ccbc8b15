"""The scaffolded stub script at scale, for bench/scale.py: its bytes a unit, the CPU and memory
of parsing it, and the stub server's memory while it answers every unit's sessions.

Each measure runs in a process of its own (`python bench/_scale_stub.py parse|serve ...`),
so its peak RSS is its own; it prints one JSON object. (A leading underscore keeps
bench/run_all.py from running it.)
"""

from __future__ import annotations

import http.client
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devloop.llm.stub import Script, StubServer

# A request as a session sends it, with a system prompt and tools about a real session's size
# (3,500 tokens): a stub that kept every body would grow by this much a request.
PROMPT = "You are the coder of one unit of a DevLoop project. " * 260


def rss_mb() -> float:
    """This process's resident memory now, MB."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def parse(script: Path) -> dict[str, Any]:
    """Load the script as `devloop run --llm stub` does: its check, then its stub (same file)."""
    cpu = []
    for _ in range(2):
        c0 = time.process_time()
        Script.load(script)
        cpu.append(time.process_time() - c0)
    return {"parse_cpu_s": cpu[0], "second_load_cpu_s": cpu[1], "parse_peak_mb": peak_mb()}


def serve(script: Path, company: str, pid: str, units: list[str], record: bool) -> dict[str, Any]:
    """A stub on the script answers turn 1 of every unit's coder and tester sessions: its RSS
    after loading and after answering, and what it kept of the requests."""
    base = rss_mb()
    with StubServer(script, record_bodies=record) as stub:
        loaded = rss_mb()
        conn = http.client.HTTPConnection(stub.host, stub.port, timeout=30)
        c0, w0 = time.process_time(), time.perf_counter()
        for unit in units:
            for role in ("coder", "tester"):
                body = json.dumps({
                    "model": "claude-sonnet-4-6", "max_tokens": 4096, "system": PROMPT,
                    "metadata": {"user_id": f"{role}.{company}.{pid}.{unit}"},
                    "messages": [{"role": "user", "content": f"Work on {unit}."}],
                })
                conn.request("POST", "/v1/messages", body, {
                    "content-type": "application/json", "x-api-key": "bench",
                    "anthropic-version": "2023-06-01"})
                answer = conn.getresponse()
                answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"{role} {unit}: the stub answered {answer.status}")
        conn.close()
        answered = {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0}
        kept = sum(r.body is not None for r in stub.requests)
        return {"requests": len(stub.requests), "bodies_kept": kept,
                "base_mb": base, "loaded_mb": loaded, "after_mb": rss_mb(),
                "grew_mb": rss_mb() - loaded, **answered}


def child(*args: str) -> dict[str, Any]:
    """Run one measure in a fresh process and return what it printed."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          check=False, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"_scale_stub.py {args[0]} failed: {done.stderr[-800:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measure(project: Path, company: str, pid: str, record_too: bool) -> dict[str, Any]:
    """Every stub measure of one scaffolded project."""
    script = project / "stub.yaml"
    units = [u["id"] for u in json.loads((project / "units.json").read_text())["units"]]
    out: dict[str, Any] = {"script_bytes": script.stat().st_size,
                           "bytes_per_unit": script.stat().st_size / len(units)}
    out.update(child("parse", str(script)))
    out["serve"] = child("serve", str(script), str(project), company, pid)
    if record_too:
        out["serve_recording"] = child("serve", str(script), str(project), company, pid,
                                       "--record")
    return out


def main(argv: list[str]) -> None:
    what, script = argv[0], Path(argv[1])
    if what == "parse":
        result = parse(script)
    else:
        project, company, pid = Path(argv[2]), argv[3], argv[4]
        units = [u["id"] for u in json.loads((project / "units.json").read_text())["units"]]
        result = serve(script, company, pid, units, record="--record" in argv)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
