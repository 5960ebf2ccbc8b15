"""The task-queue port on Celery (workers/celery_queue.py): chains by task name with the attempt's
ids, routed to their queues, and a broker that does not answer told as QueueUnreachable."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.queue import QueueUnreachable
from devloop.server.redis_server import RedisServer
from workers.app import make_app
from workers.celery_queue import BROKER_LOST, CeleryQueue
from workers.chains import chain_for

MSG = StepMsg(pid="p-queue", unit_id="u", attempt=2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_chain_is_coder_then_tester_then_decide_with_the_attempts_ids() -> None:
    steps = chain_for(make_app(url="redis://127.0.0.1:1/0"), MSG).tasks
    assert [(s.task, s.options["task_id"], s.immutable) for s in steps] == [
        ("devloop.coder", MSG.task_id("coder"), True),  # the message, not a result
        ("devloop.tester", MSG.task_id("tester"), False),  # gets the coder's result
        ("devloop.decide", MSG.task_id("decide"), False),
    ]
    assert steps[0].args == (MSG.model_dump(mode="json"),)


def test_a_tester_only_chain_starts_at_the_tester_with_the_message() -> None:
    msg = MSG.model_copy(update={"skip_coder": True})
    steps = chain_for(make_app(url="redis://127.0.0.1:1/0"), msg).tasks
    assert [(s.task, s.immutable) for s in steps] == [("devloop.tester", True),
                                                      ("devloop.decide", False)]


def test_a_sent_chain_waits_on_the_coder_queue_under_its_task_id(
    redis_server: RedisServer,
) -> None:
    queue = CeleryQueue()
    queue.connect(redis_server.celery_url)
    client = redis_server.client()
    client.delete("coder")
    queue.send([Dispatch(msg=MSG)])
    [raw] = client.lrange("coder", 0, -1)
    client.delete("coder")  # no worker of another test may take it
    headers = json.loads(raw)["headers"]
    assert (headers["task"], headers["id"]) == ("devloop.coder", MSG.task_id("coder"))
    assert headers["ignore_result"] is True  # as the tasks have it: nothing reads a result


SENDER = """
import sys
from devloop.fleet.messages import Dispatch, StepMsg
import workers.main
q = workers.main.CeleryQueue()
q.connect(sys.argv[1])
q.send([Dispatch(msg=StepMsg(pid="p-sender", unit_id="u", attempt=1))])
print(" ".join(sorted(sys.modules)))
"""


def test_a_command_that_sends_loads_neither_the_steps_nor_the_model_client_nor_the_web(
    redis_server: RedisServer,
) -> None:
    """The CLI sends chains by task name: importing the steps would load the SDK (about a
    second of CPU per command), and only `--console` needs the console's app and server
    (the token checks in console/auth.py use a few of Starlette's types, a hundredth of that)."""
    done = subprocess.run([sys.executable, "-c", SENDER, redis_server.celery_url],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "celery" in loaded and "workers.chains" in loaded  # it did send, through Celery
    heavy = {"workers.tasks", "anthropic", "devloop.llm.anthropic", "uvicorn", "sse_starlette",
             "starlette.applications", "devloop.console.app", "devloop.console.server"}
    assert loaded & heavy == set()
    client = redis_server.client()
    assert client.llen("coder") == 1
    client.delete("coder")  # no worker of another test may take it


WORKER_START = """
import sys
from workers.worker_app import app
app.loader.import_default_modules()  # what `celery worker` loads before forking its pool
print("workers.tasks" in sys.modules, "anthropic" in sys.modules)
from workers.tasks import provider
provider()  # a pool process's first session
print("anthropic" in sys.modules)
"""


def test_a_workers_main_process_loads_the_steps_but_not_the_model_client() -> None:
    """The SDK's import is about a CPU-second: a worker's main process only routes tasks, so
    the pool process that runs a session is the one that loads it."""
    env = {**os.environ, "ANTHROPIC_API_KEY": "test", "DEVLOOP_REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run([sys.executable, "-c", WORKER_START], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True"]


def test_a_broker_that_goes_away_mid_ping_is_queue_unreachable(tmp_path: Path) -> None:
    """A run's Redis stops as its run ends, maybe while a command waits for workers to
    answer: the client's own error comes out of the ping's collection, and is turned into the
    port's (seen as a traceback from `devloop status` on a busy machine)."""
    with RedisServer(tmp_path / "gone") as server:
        watcher = server.client()
        seen: list[bool] = []

        def close_mid_ping() -> None:
            # The ping's reply queue is bound once it is sent: from then on it collects.
            deadline = time.monotonic() + 30
            while not watcher.keys("_kombu.binding.reply.*") and time.monotonic() < deadline:
                time.sleep(0.01)
            seen.append(bool(watcher.keys("_kombu.binding.reply.*")))
            server.close()

        queue = CeleryQueue()
        queue.connect(server.celery_url)
        closer = threading.Thread(target=close_mid_ping)
        closer.start()
        try:
            with pytest.raises(QueueUnreachable):
                queue.consumers(timeout_s=10.0)  # no worker answers: it would wait it all
        finally:
            closer.join(40)
        assert seen == [True]  # the server went away during the collection, not before


@pytest.mark.timeout(120)
def test_a_broker_that_does_not_answer_is_queue_unreachable() -> None:
    queue = CeleryQueue()
    queue.connect(f"redis://127.0.0.1:{free_port()}/0")
    started = time.monotonic()
    with pytest.raises(QueueUnreachable):
        queue.send([Dispatch(msg=MSG)])
    with pytest.raises(QueueUnreachable):
        queue.consumers(timeout_s=0.2)
    assert time.monotonic() - started < 30  # the publish retries are short, then it says so


@pytest.mark.timeout(120)
def test_a_broker_gone_after_the_connection_was_made_is_queue_unreachable_within_seconds(
    tmp_path: Path,
) -> None:
    """kombu's mailbox (a ping, a revoke) publishes with retry=True and no policy: on a
    connection made before the Redis went away that retried forever (seen: `devloop status`
    hung as its run's Redis stopped between the ping's reply binding and its publish)."""
    outcomes: list[str] = []
    with RedisServer(tmp_path / "gone") as server:
        queue = CeleryQueue()
        queue.connect(server.celery_url)
        assert queue.consumers(timeout_s=0.2) == {}  # the pool's connection is made: no worker
        # A broadcast's own line, its channel open, as when the Redis goes away mid-ping.
        line = queue.app.connection_for_write()
        producer = line.Producer()
        producer.publish({}, routing_key="probe", retry=True)
        server.close()

    def each_call() -> None:
        calls = (lambda: queue.revoke(["t"]), lambda: queue.consumers(timeout_s=0.2),
                 lambda: producer.publish({}, routing_key="probe", retry=True))
        for call in calls:
            try:
                call()
                outcomes.append("answered")
            except QueueUnreachable:
                outcomes.append("unreachable")
            except BROKER_LOST:
                outcomes.append("lost")

    caller = threading.Thread(target=each_call, daemon=True)  # a hang must not hang the suite
    caller.start()
    caller.join(60)  # about 15 s of reconnect pauses; a hang never ends
    line.release()
    assert outcomes == ["unreachable", "unreachable", "lost"]
