"""Ids are names, never paths: a project naming a unit `../../secret` is refused before
anything is read or written (import, enqueue, run), and every place that joins an id to a
path or a key checks the rule again."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import redis

from devloop.core.config import Settings
from devloop.core.errors import ProjectInvalid
from devloop.core.ids import InvalidId, check_id, id_dir, id_fault, is_valid_id, valid_form
from devloop.core.suggest import closest_id, unknown
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.messages import StepMsg
from devloop.roles.workspace import Workspace
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.proctree import run_bounded

DEVLOOP = Path(sys.executable).parent / "devloop"
CLIMB = "../../secret"
REFUSED = [
    f'units.json: {field}: "{CLIMB}" is not a valid unit id; fix: letters, digits, - and _ only, '
    'e.g. "secret"'
    for field in ("units[0].id", "units[1].depends_on[0]")
]


def climbing_project(todo_project: Path) -> Path:
    """The todo example with todo-be renamed `../../secret` everywhere, next to a secret
    folder that units/../../secret reaches: before the id rule it validated and imported."""
    secret = todo_project.parent / "secret"
    (secret / "code").mkdir(parents=True)
    (secret / "code" / "key.txt").write_text("TOP SECRET\n")
    units = json.loads((todo_project / "units.json").read_text())
    units["units"][0]["id"] = CLIMB
    units["units"][1]["depends_on"] = [CLIMB]
    (todo_project / "units.json").write_text(json.dumps(units))
    html = todo_project / "sdd/mvcp/control.html"
    html.write_text(html.read_text().replace('data-unit-id="todo-be"', f'data-unit-id="{CLIMB}"'))
    (todo_project / "units/todo-be/spec.json").unlink()
    return todo_project


def test_the_rule_accepts_names_and_refuses_paths() -> None:
    for good in ("a", "todo-be", "U_1", "9", "x" * 64):
        assert is_valid_id(good), good
    for bad in ("", "..", ".", "a/b", "/abs", "a\nb", "a b", "-a", "_a", "é", "x" * 65, "a\0"):
        assert not is_valid_id(bad), bad
    assert not is_valid_id("abc\n")  # `$` would let a trailing newline through; fullmatch does not


def test_import_of_a_climbing_unit_id_is_refused_and_writes_nothing(
    todo_project: Path, redis_store: RedisStore, redis_client: redis.Redis
) -> None:
    project = climbing_project(todo_project)
    with pytest.raises(ProjectInvalid) as caught:
        enqueue_project(redis_store, project)
    assert [str(p) for p in caught.value.problems] == REFUSED
    assert redis_client.dbsize() == 0


def test_devloop_enqueue_refuses_a_climbing_unit_id_with_exit_2(
    todo_project: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    project = climbing_project(todo_project)
    env = {**os.environ, "DEVLOOP_REDIS_URL": redis_server.celery_url}
    done = run_bounded([str(DEVLOOP), "enqueue", str(project)], timeout=120, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == REFUSED
    assert redis_client.dbsize() == 0


def test_devloop_run_refuses_a_climbing_unit_id_before_starting_anything(
    todo_project: Path,
) -> None:
    project = climbing_project(todo_project)
    done = run_bounded([str(DEVLOOP), "run", str(project), "--llm", "stub"], timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == REFUSED
    assert not (project / ".devloop").exists()  # no embedded Redis, no workers


@pytest.mark.parametrize("command", ["status", "pull", "unblock"])
def test_commands_on_a_folder_or_id_that_is_not_a_valid_project_id_exit_2(
    todo_project: Path, redis_server: RedisServer, command: str, tmp_path: Path
) -> None:
    units = json.loads((todo_project / "units.json").read_text())
    units["project_id"] = "../x"
    (todo_project / "units.json").write_text(json.dumps(units))
    extra = {"pull": [str(tmp_path / "out")], "unblock": ["todo-be", "--hint", "h"]}
    env = {**os.environ, "DEVLOOP_REDIS_URL": redis_server.celery_url}
    for target in (str(todo_project), "../x"):
        argv = [str(DEVLOOP), command, target, *extra.get(command, [])]
        done = run_bounded(argv, timeout=120, env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        [line] = done.stderr.splitlines()
        assert '"../x" is not a valid project id; fix: letters, digits, - and _ only' in line


# --- the second line: joining an id to a path or a key checks it again ---------------


def test_id_dir_refuses_what_would_leave_its_root(tmp_path: Path) -> None:
    assert id_dir(tmp_path / "units", "todo-be") == tmp_path / "units" / "todo-be"
    for bad in ("..", "../x", "/etc", "a/b", ""):
        with pytest.raises(InvalidId):
            id_dir(tmp_path / "units", bad)
    with pytest.raises(InvalidId, match='"a/b" is not a valid unit id'):
        check_id("a/b", "unit id")


def test_a_view_is_never_made_for_a_bad_unit_id(
    redis_store: RedisStore, settings: Settings
) -> None:
    # Workspace refuses at construction: no view dir is made, nothing is chmodded.
    with pytest.raises(InvalidId):
        Workspace(redis_store, "p-todo", "../../etc", "coder", 1, settings=settings)


def test_store_keys_and_step_messages_refuse_bad_ids(redis_store: RedisStore) -> None:
    with pytest.raises(InvalidId):
        redis_store.keys("p:*")
    with pytest.raises(InvalidId):
        redis_store.keys("p-todo").files("todo-be:files")
    with pytest.raises(ValueError, match="is not a valid unit id"):
        StepMsg(pid="p-todo", unit_id="../x", attempt=1)


# --- suggestions: a did-you-mean or an e.g. is always a valid id ----------------------


@pytest.mark.parametrize(("value", "meant"), [
    ("money.v2", "money-v2"), ("../../secret", "secret"), ("-x", "x"), ("a b\tc", "a-b-c"),
    ("_x.", "x"), ("..", None), ("", None), ("é", None), ("x" * 70 + ".y", "x" * 64),
])
def test_the_valid_form_of_an_id_is_valid_or_none(value: str, meant: str | None) -> None:
    assert valid_form(value) == meant
    fault = id_fault(value, "unit id")
    assert fault is not None
    if meant is not None and len(value) <= 64:
        assert fault[1].endswith(f', e.g. "{meant}"')
    for quoted in re.findall(r'e\.g\. "([^"]*)"', fault[1]):
        assert is_valid_id(quoted)


def test_a_did_you_mean_never_names_an_id_that_breaks_the_rule() -> None:
    """Choices may hold an invalid id (a spec being fixed): it is never offered."""
    problem = unknown("spec.yaml", "depends_on", "unit", "money-v2", ["money.v2", "cart"])
    assert str(problem) == 'spec.yaml: depends_on: no unit "money-v2"; fix: pick one of cart'
    assert closest_id("money.v2", ["money.v2", "money-v2"]) == "money-v2"
