"""Flower: it lists a run's tasks, and only to whoever holds its credentials, on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import yaml

from devloop.cli.run.procs import flower_command, flower_credentials, flower_env, spawn, stop
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet
from tests.leftovers import views_of_killed_processes
from tests.proctree import descendants, run_bounded

DEVLOOP = str(Path(sys.executable).parent / "devloop")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(url: str, auth: str | None = None, body: dict[str, object] | None = None
         ) -> tuple[int, bytes]:
    """Status and body of a GET (or a JSON POST when body is given), with basic auth."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if auth:
        request.add_header("Authorization", "Basic " + b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_listening(port: int, log: Path, timeout_s: float = 60) -> None:
    """Until Flower answers at all (it answers 401 before any credentials are checked)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            http(f"http://127.0.0.1:{port}/api/workers")
            return
        except OSError:
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
            time.sleep(0.3)


def listen_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp* shows them) of sockets listening on port."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


@contextmanager
def flower(redis_server: RedisServer, log: Path, env_extra: dict[str, str] | None = None
           ) -> Iterator[tuple[int, str, subprocess.Popen[bytes]]]:
    """Flower as `devloop run --flower` starts it, on the test broker: (port, auth, process)."""
    port = free_port()
    auth, fresh = flower_credentials(None)
    assert fresh
    env = {**os.environ, "DEVLOOP_REDIS_URL": redis_server.celery_url, **(env_extra or {})}
    proc = spawn(flower_command(port), flower_env(env, auth), log)
    try:
        wait_listening(port, log)
        yield port, auth, proc
    finally:
        stop([proc])


@pytest.mark.timeout(120)
def test_flower_lists_the_runs_tasks_through_its_api(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    with flower(redis_server, tmp_path / "flower.log") as (port, auth, _):
        plans = [UnitPlan("seen")]
        with fleet(redis_store, redis_server.celery_url, build(tmp_path / "p", plans),
                   script(plans), workers=1) as f:
            f.wait()
        deadline = time.monotonic() + 20
        while True:
            status, body = http(f"http://127.0.0.1:{port}/api/tasks", auth)
            assert status == 200, body
            tasks = json.loads(body)
            names = {t["name"] for t in tasks.values()}
            if {"devloop.coder", "devloop.tester", "devloop.decide"} <= names:
                break
            assert time.monotonic() < deadline, tasks
            time.sleep(0.5)
        assert "p-fleet:seen:coder:1" in tasks
        coder = tasks["p-fleet:seen:coder:1"]
        assert coder["state"] == "SUCCESS" and "'unit_id': 'seen'" in coder["args"]
        assert "'attempt': 1" in coder["args"]


FORGED = {"args": [{"pid": "p", "unit_id": "u", "role": "tester", "attempt": 1}]}


def test_flower_answers_401_without_credentials_even_with_the_unauthenticated_switch(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # FLOWER_UNAUTHENTICATED_API in the caller's environment must not open it up.
    opened = {"FLOWER_UNAUTHENTICATED_API": "true"}
    with flower(redis_server, tmp_path / "flower.log", opened) as (port, auth, _):
        base = f"http://127.0.0.1:{port}"
        user, _, password = auth.partition(":")
        for who in (None, f"{user}:wrong", f"someone:{password}"):
            assert http(f"{base}/api/workers", who)[0] == 401
            assert http(f"{base}/api/tasks", who)[0] == 401
            assert http(f"{base}/", who)[0] == 401
            for verb in ("apply", "async-apply", "send-task"):
                assert http(f"{base}/api/task/{verb}/devloop.decide", who, FORGED)[0] == 401
        assert redis_client.llen("control") == 0  # no forged task reached the queue
        assert http(f"{base}/api/workers", auth)[0] == 200
        status, body = http(f"{base}/api/task/async-apply/devloop.decide", auth, FORGED)
        assert status == 200, body
        assert redis_client.llen("control") == 1  # the holder of the credentials may


@pytest.mark.timeout(180)
def test_flower_metrics_and_healthcheck_need_the_credentials_too(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    with flower(redis_server, tmp_path / "flower.log") as (port, auth, _):
        plans = [UnitPlan("seen")]  # events, so the metrics have worker names and tasks
        with fleet(redis_store, redis_server.celery_url, build(tmp_path / "p", plans),
                   script(plans), workers=1) as f:
            f.wait()
        base = f"http://127.0.0.1:{port}"
        user, _, password = auth.partition(":")
        for path in ("/metrics", "/healthcheck"):
            for who in (None, f"{user}:wrong", f"someone:{password}"):
                status, body = http(base + path, who)
                assert status == 401, (path, who, body[:200])
                assert b"devloop" not in body and body != b"OK"
        status, metrics = http(f"{base}/metrics", auth)
        assert status == 200 and b"flower_events_total" in metrics
        assert b'task="devloop.coder"' in metrics  # what a stranger was shown before
        assert http(f"{base}/healthcheck", auth) == (200, b"OK")


def test_flower_listens_on_loopback_only_and_shows_no_secret(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    log = tmp_path / "flower.log"
    with flower(redis_server, log) as (port, auth, proc):
        assert listen_addresses(port) == {"0100007F"}  # 127.0.0.1, nothing on tcp6
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert auth not in cmdline
        assert f"FLOWER_BASIC_AUTH={auth}".encode() in environ
        assert redis_server.password not in cmdline
        assert "--address=127.0.0.1" in cmdline
    text = log.read_text()
    assert "Visit me at" in text and "Broker: redis+socket://:**@" in text
    assert redis_server.password not in text and auth.partition(":")[2] not in text


def test_devloop_run_flower_is_authenticated_and_prints_its_credentials_once(
    tmp_path: Path,
) -> None:
    # A first turn slow enough to look at Flower while the run is live; Ctrl-C ends it.
    plans = [UnitPlan("slow", coder_latency_ms={1: 120_000})]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    port = free_port()
    out = tmp_path / "out.txt"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEVLOOP_REDIS", "DEVLOOP_FLOWER", "ANTHROPIC_"))}
    with views_of_killed_processes(), open(out, "wb") as sink:
        run = subprocess.Popen(
            [DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "1", "--flower",
             "--flower-port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT, env={**env, "COLUMNS": "200"},
        )
        try:
            deadline = time.monotonic() + 120
            while "Flower: " not in out.read_text():
                assert run.poll() is None and time.monotonic() < deadline, out.read_text()
                time.sleep(0.2)
            line = next(x for x in out.read_text().splitlines() if x.startswith("Flower: "))
            prefix = f"Flower: http://127.0.0.1:{port} (user devloop, password "
            assert line.startswith(prefix) and line.endswith(")"), line
            auth = "devloop:" + line[len(prefix):-1]
            wait_listening(port, project / ".devloop/flower.log")
            base = f"http://127.0.0.1:{port}"
            assert http(f"{base}/api/workers")[0] == 401
            assert http(f"{base}/metrics")[0] == 401 and http(f"{base}/healthcheck")[0] == 401
            assert http(f"{base}/api/task/async-apply/devloop.decide", None, FORGED)[0] == 401
            assert http(f"{base}/api/workers", auth)[0] == 200
            assert listen_addresses(port) == {"0100007F"}
            [flower_proc] = [p for p in descendants(run.pid) if " flower " in p.cmdline]
            assert auth not in flower_proc.cmdline
            redis_password = _requirepass(project / ".devloop/redis.conf")
            assert not any(redis_password in p.cmdline for p in descendants(run.pid))
        finally:
            run.send_signal(signal.SIGINT)  # Ctrl-C: it stops what it started
            run.wait(timeout=120)
    printed = out.read_text()
    assert printed.count(auth.partition(":")[2]) == 1  # printed once, with the link
    logs = {p.name: p.read_text(errors="replace") for p in (project / ".devloop").glob("*.log")}
    assert {"flower.log", "worker-0.log", "redis.log"} <= set(logs)
    assert "Broker: redis+socket://:**@" in logs["flower.log"]
    for text in logs.values():
        assert auth.partition(":")[2] not in text
    for text in [printed, *logs.values()]:
        assert redis_password not in text


def _requirepass(config: Path) -> str:
    line = next(x for x in config.read_text().splitlines() if x.startswith("requirepass "))
    return line.split('"')[1]


def test_devloop_flower_refuses_to_start_without_credentials(redis_server: RedisServer) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVLOOP_FLOWER")}
    env["DEVLOOP_REDIS_URL"] = redis_server.celery_url
    done = run_bounded([DEVLOOP, "flower"], env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("DEVLOOP_FLOWER_AUTH: environment: not set; fix:")
    bad = run_bounded([DEVLOOP, "flower"], env={**env, "DEVLOOP_FLOWER_AUTH": "hunter2"},
                      timeout=60)
    assert bad.returncode == 2 and "not user:password" in bad.stderr
    assert "hunter2" not in bad.stdout + bad.stderr


def test_devloop_flower_serves_behind_the_configured_credentials(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    port, auth = free_port(), "ops:correct-horse"
    env = {**os.environ, "DEVLOOP_REDIS_URL": redis_server.celery_url,
           "DEVLOOP_FLOWER_AUTH": auth, "FLOWER_UNAUTHENTICATED_API": "true"}
    log = tmp_path / "flower.log"
    proc = spawn([DEVLOOP, "flower", "--port", str(port)], env, log)
    try:
        wait_listening(port, log)
        assert http(f"http://127.0.0.1:{port}/api/workers")[0] == 401
        assert http(f"http://127.0.0.1:{port}/metrics")[0] == 401
        assert http(f"http://127.0.0.1:{port}/api/workers", auth)[0] == 200
        assert http(f"http://127.0.0.1:{port}/metrics", auth)[0] == 200
        assert listen_addresses(port) == {"0100007F"}
        assert "correct-horse" not in Path(f"/proc/{proc.pid}/cmdline").read_text()
    finally:
        stop([proc])


def test_a_flower_without_the_routes_it_guards_is_refused_rather_than_run_open() -> None:
    from tornado.web import RequestHandler

    from workers.flower import GUARDED, FlowerChanged, guard_routes

    routes: list[object] = [("/metrics", RequestHandler), ("/api/workers", RequestHandler)]
    with pytest.raises(FlowerChanged, match="/healthcheck"):
        guard_routes(routes)
    routes.append(("/healthcheck", RequestHandler))
    guard_routes(routes)
    assert routes == [("/metrics", GUARDED["/metrics"]), ("/api/workers", RequestHandler),
                      ("/healthcheck", GUARDED["/healthcheck"])]
