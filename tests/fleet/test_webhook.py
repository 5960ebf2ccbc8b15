"""Calling a person: one POST per blocked or review event, signed, retried, never twice,
never to where a redirect points."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devloop.fleet import signing
from devloop.fleet.control import set_console_url
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.webhook import Notifier
from devloop.store import RedisStore, UnitState
from tests.conftest import REPO
from tests.fleet.builder import UnitPlan, build
from tests.proctree import run_bounded
from tests.webhook_receiver import Receiver
from tests.workers.runproc import DEVLOOP, clean_env

PID = "p-fleet"
SECRET = "0123456789abcdef0123456789abcdef-webhook-test"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(secret=SECRET)
    try:
        yield server
    finally:
        server.close()


def _blocked(store: RedisStore) -> None:
    store.put_state(PID, "b", UnitState(
        status="blocked", attempt=3, blocked_reason="the same failure 3 times",
        last_hint="value() must return 42, not 41"))


def test_a_blocked_unit_is_posted_once_with_its_reason_hint_and_console_link(
    redis_store: RedisStore, tmp_path: Path, receiver: Receiver
) -> None:
    enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b")]))
    set_console_url(redis_store, PID, "http://127.0.0.1:8765")
    first = Notifier(redis_store, [PID], receiver.url, SECRET, base_s=0.05).start()
    second = Notifier(redis_store, [PID], receiver.url, SECRET, base_s=0.05).start()
    try:
        time.sleep(0.3)  # both follow the stream now
        redis_store.put_state(PID, "a", UnitState(status="coding", attempt=1))  # not a call
        _blocked(redis_store)
        [call] = receiver.wait_for(1, timeout_s=30)
        time.sleep(1.0)  # a second notifier, had it sent too, would have by now
    finally:
        first.stop()
        second.stop()
    assert len(receiver.calls) == 1
    assert {k: call[k] for k in ("event", "project", "unit", "status", "attempt", "reason",
                                 "hint", "console")} == {
        "event": "unit_blocked", "project": PID, "unit": "b", "status": "blocked",
        "attempt": 3, "reason": "the same failure 3 times",
        "hint": "value() must return 42, not 41",
        "console": "http://127.0.0.1:8765/p/p-fleet/u/b",
    }
    assert call["id"] and call["ts"].endswith("Z") and "last_failure" in call
    assert receiver.bad_signatures == []  # the receiver checked it with the library's verify


def test_a_receiver_that_fails_is_retried_with_backoff(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("b")]))
    flaky = Receiver(fail_first=2, fail_status=503)
    notifier = Notifier(redis_store, [PID], flaky.url, SECRET, base_s=0.05).start()
    try:
        time.sleep(0.3)
        redis_store.put_state(PID, "b", UnitState(status="review", attempt=1))
        [call] = flaky.wait_for(1, timeout_s=30)
    finally:
        notifier.stop()
        flaky.close()
    assert flaky.attempts == 3 and call["event"] == "unit_review"


def test_an_event_it_cannot_read_is_skipped_and_the_next_call_still_goes_out(
    redis_store: RedisStore, tmp_path: Path, receiver: Receiver
) -> None:
    enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b")]))
    notifier = Notifier(redis_store, [PID], receiver.url, SECRET, base_s=0.05).start()
    try:
        time.sleep(0.3)
        # A blocked event with no unit (anyone who reaches Redis can write one).
        redis_store.client.xadd(redis_store.keys(PID).events,
                                {"kind": "state", "status": "blocked", "attempt": 1})
        _blocked(redis_store)
        [call] = receiver.wait_for(1, timeout_s=30)
    finally:
        notifier.stop()
    assert call["unit"] == "b"


def _one_delivery(store: RedisStore, tmp_path: Path, receiver: Receiver,
                  **notifier: Any) -> None:
    """One blocked unit, delivered (or tried) by a notifier signing with SECRET."""
    enqueue_project(store, build(tmp_path / "p", [UnitPlan("b")]))
    sender = Notifier(store, [PID], receiver.url, SECRET, base_s=0.05, **notifier).start()
    try:
        time.sleep(0.3)
        _blocked(store)
        deadline = time.monotonic() + 30
        while receiver.attempts < notifier.get("attempts", 1) and not sender.delivered:
            assert time.monotonic() < deadline, "no webhook POST arrived"
            time.sleep(0.05)
        time.sleep(0.5)  # a redirect, had it been followed, would have arrived by now
    finally:
        sender.stop()
    assert list(sender.delivered) == receiver.calls  # delivered: what was accepted, only


def test_a_call_is_signed_and_verify_refuses_a_forgery_a_change_and_a_late_replay(
    redis_store: RedisStore, tmp_path: Path, receiver: Receiver
) -> None:
    _one_delivery(redis_store, tmp_path, receiver)
    [post] = [r for r in receiver.requests if r.method == "POST"]
    header = post.headers[signing.HEADER.lower()]
    assert re.fullmatch(r"t=\d+,v1=[0-9a-f]{64}", header), header
    stamp = signing.verify(SECRET, post.body, header)
    assert abs(time.time() - stamp) < 60
    with pytest.raises(signing.BadSignature, match="does not match"):
        signing.verify("another-secret-of-the-same-length-0123456789", post.body, header)
    with pytest.raises(signing.BadSignature, match="does not match"):
        signing.verify(SECRET, post.body.replace(b'"attempt": 3', b'"attempt": 4'), header)
    with pytest.raises(signing.BadSignature, match="replay"):
        signing.verify(SECRET, post.body, header, now=stamp + signing.TOLERANCE_S + 1)
    with pytest.raises(signing.BadSignature, match="no X-DevLoop-Signature"):
        signing.verify(SECRET, post.body, None)
    with pytest.raises(signing.BadSignature, match="not t="):
        signing.verify(SECRET, post.body, header.replace("t=", "t=x"))


def test_a_redirect_is_not_followed_and_is_not_a_delivery(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    internal = Receiver()  # what a 302 points at: an internal page that answers any GET 200
    redirecting = Receiver(redirect_to=f"{internal.url}/admin?do=purge")
    try:
        _one_delivery(redis_store, tmp_path, redirecting, attempts=2)
    finally:
        redirecting.close()
        internal.close()
    assert internal.requests == []  # neither a GET nor the POST reached it
    assert redirecting.attempts == 2  # tried as a failure, then given up
    assert redirecting.calls == []


def _readme_verifier() -> Any:
    """devloop_signature_ok as docs/operations.md prints it, run as a receiver would paste it."""
    page = (REPO / "docs/operations.md").read_text()
    [code] = [block for block in re.findall(r"```python\n(.*?)```", page, re.S)
              if "def devloop_signature_ok" in block]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/operations.md", "exec"), namespace)  # noqa: S102 - the docs' snippet
    return namespace["devloop_signature_ok"]


def test_the_readme_verifier_accepts_a_real_delivery_and_refuses_a_forgery(
    redis_store: RedisStore, tmp_path: Path, receiver: Receiver
) -> None:
    verifier = _readme_verifier()
    _one_delivery(redis_store, tmp_path, receiver)
    [post] = [r for r in receiver.requests if r.method == "POST"]
    header = post.headers[signing.HEADER.lower()]
    assert verifier(SECRET, post.body, header) is True
    assert json.loads(post.body)["unit"] == "b"
    assert verifier("another-secret-of-the-same-length-0123456789", post.body, header) is False
    assert verifier(SECRET, post.body + b" ", header) is False
    assert verifier(SECRET, post.body, header, tolerance_s=-1) is False  # too old
    assert verifier(SECRET, post.body, "v1=" + header.split("v1=")[1]) is False  # no t
    assert verifier(SECRET, post.body, "garbage") is False


@pytest.mark.timeout(180)
def test_a_webhook_url_without_a_secret_is_refused_at_start_and_the_printed_fix_works(
    tmp_path: Path, receiver: Receiver
) -> None:
    project = build(tmp_path / "p", [UnitPlan("a")])  # no stub.yaml: the next check fails
    env = {k: v for k, v in clean_env(DEVLOOP_WEBHOOK_URL=receiver.url).items()
           if k != "DEVLOOP_WEBHOOK_SECRET"}
    for command in (["run", str(project), "--llm", "stub"], ["console", str(project)]):
        done = run_bounded([DEVLOOP, *command], env=env, timeout=120, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith("DEVLOOP_WEBHOOK_SECRET: environment: not set"), line
        assert "Console" not in done.stdout and not (project / ".devloop").exists()
    [fix] = re.findall(r"`([^`]+)`", line)
    assert fix == "export DEVLOOP_WEBHOOK_SECRET=$(openssl rand -hex 32)"
    # The fix as printed, then the same run: it gets past the webhook to the next check.
    shell = subprocess.run(
        ["bash", "-c", f"{fix} && printf %s \"$DEVLOOP_WEBHOOK_SECRET\" && "
         f"exec {DEVLOOP} run {project} --llm stub"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert re.fullmatch(r"[0-9a-f]{64}", shell.stdout.splitlines()[0]), shell.stdout
    assert shell.returncode == 2 and "stub.yaml: file: not found" in shell.stderr, shell.stderr
    short = run_bounded([DEVLOOP, "run", str(project), "--llm", "stub"], timeout=120,
                        env={**env, "DEVLOOP_WEBHOOK_SECRET": "hunter2"}, cwd=tmp_path)
    assert short.returncode == 2 and "shorter than 32 characters" in short.stderr
    assert "hunter2" not in short.stdout + short.stderr
