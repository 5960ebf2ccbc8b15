"""A busy console port is reported, never hidden: `devloop console` binds its socket before it
prints a link, refuses a port named on its command line that another program holds, and
takes a free port (saying so) when the default one is taken. Real sockets, a real squatter
in a process of its own."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.console.listen import ListenFailed, listen
from devloop.fleet.dispatch import enqueue_project
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.console.squatter import Squatter, get, opener
from tests.fleet.builder import UnitPlan, build
from tests.proctree import kill_tree
from tests.workers.runproc import DEVLOOP, clean_env
from tests.workers.test_cli_run import devloop


@pytest.fixture
def squatter(tmp_path: Path) -> Iterator[Squatter]:
    with Squatter(tmp_path / "squatter.log") as held:
        yield held


def _answers_http(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return conn.recv(100).startswith(b"HTTP/1.")


def test_a_port_named_on_the_command_line_that_another_program_holds_is_refused(
    squatter: Squatter,
) -> None:
    with pytest.raises(ListenFailed) as refused:
        listen("127.0.0.1", squatter.port, explicit=True, command="devloop console",
               option="--port")
    assert str(refused.value) == (
        f"devloop console: --port: port {squatter.port} on 127.0.0.1 is taken by another "
        "program; fix: pass another --port N, or leave --port out to let DevLoop choose a "
        "free port")


def test_the_default_port_taken_gives_way_to_a_free_port_that_is_ours(
    squatter: Squatter,
) -> None:
    listener = listen("127.0.0.1", squatter.port, explicit=False, command="devloop console",
                      option="--port")
    try:
        assert listener.moved and listener.asked == squatter.port
        assert listener.port != squatter.port
        assert listener.note() == (
            f"console: port {squatter.port} on 127.0.0.1 is taken by another program; the "
            f"console listens on port {listener.port} instead")
        # Ours: a connection to it lands in our socket's queue, not the squatter's.
        with socket.create_connection(("127.0.0.1", listener.port), timeout=5):
            accepted, _ = listener.sockets[0].accept()
            accepted.close()
    finally:
        listener.close()


def test_every_address_is_bound_so_the_printed_loopback_link_cannot_reach_another_server(
    squatter: Squatter,
) -> None:
    """`--host ::` prints a 127.0.0.1 link: listening on IPv6 alone would leave 127.0.0.1
    to whoever holds it, so the wildcard takes IPv4 too, and a held 127.0.0.1 port is busy."""
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this host")
    with pytest.raises(ListenFailed, match=f"port {squatter.port} on :: is taken"):
        listen("::", squatter.port, explicit=True, command="devloop run",
               option="--console-port")
    free = listen("::", 0, explicit=True, command="devloop run", option="--console-port")
    try:
        with socket.create_connection(("127.0.0.1", free.port), timeout=5):
            pass  # the IPv4 link reaches this socket
    finally:
        free.close()


@pytest.mark.timeout(120)
def test_standalone_console_refuses_a_busy_port_and_moves_off_a_busy_default(
    tmp_path: Path, squatter: Squatter, redis_server: RedisServer, redis_store: RedisStore
) -> None:
    project = build(tmp_path / "p", [UnitPlan("a")])
    enqueue_project(redis_store, project)  # imported, as a run beside it would have
    refused = devloop("console", str(project), "--port", str(squatter.port), timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.splitlines() == [
        f"devloop console: --port: port {squatter.port} on 127.0.0.1 is taken by another "
        "program; fix: pass another --port N, or leave --port out to let DevLoop choose a "
        "free port"]
    assert not (project / ".devloop").exists()  # refused before anything started

    out = tmp_path / "console.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen([DEVLOOP, "console", str(project)], stdout=sink,
                                stderr=subprocess.STDOUT,
                                env=clean_env(DEVLOOP_CONSOLE_PORT=str(squatter.port),
                                              DEVLOOP_REDIS_URL=redis_server.url))
    try:
        found: list[tuple[str, str]] = []
        for _ in range(600):
            found = re.findall(r"DevLoop console: http://127\.0\.0\.1:(\d+)/\?token=(\S+)",
                               out.read_text())
            if found or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert found, out.read_text()
        [(port, token)] = found
        assert int(port) != squatter.port
        assert (f"console: port {squatter.port} on 127.0.0.1 is taken by another program; "
                f"the console listens on port {port} instead") in out.read_text()
        page = get(opener(), f"http://127.0.0.1:{port}/?token={token}", timeout_s=60)
        assert "p-fleet · DevLoop console" in page  # the project's page, from our server
        assert _answers_http(squatter.port)  # the squat is real, and it got no token
        assert not any(token in line for line in squatter.requests())
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # uvicorn stops, then re-raises the signal it caught
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait(timeout=30)


def test_the_stub_llm_default_port_is_not_the_console_default() -> None:
    """Both run on one machine (a relay model beside a console): neither takes the other's."""
    from typer.main import get_command

    from devloop.cli.commands import app
    from devloop.core.config import Settings

    [port] = [p for p in get_command(app).commands["stub-llm"].params  # type: ignore[attr-defined]
              if p.name == "port"]
    assert port.default == 8766 != Settings.model_fields["console_port"].default
