"""Unit files: compare-and-set on the version, once per (role, attempt), capped."""

from __future__ import annotations

import pytest
import redis

from devloop.core.errors import FileTooLarge
from devloop.store import CommitResult, RedisStore, UnsafePath

PID, UNIT = "p1", "u1"


def commit(
    store: RedisStore, base: int, changes: dict[str, bytes | None], role: str = "coder", n: int = 1
) -> CommitResult:
    """Commit changes to the test unit as (role, attempt n) from version base."""
    return store.commit_files(PID, UNIT, role=role, attempt=n, base_version=base, changes=changes)


def test_a_new_unit_is_empty_at_version_zero(redis_store: RedisStore) -> None:
    files = redis_store.unit_files(PID, UNIT)
    assert (files.version, files.files) == (0, {})


def test_a_commit_applies_and_bumps_the_version(redis_store: RedisStore) -> None:
    result = commit(redis_store, 0, {"code/a.js": b"a", "contract.json": b"{}"})
    assert (result.applied, result.version, result.reason) == (True, 1, None)
    files = redis_store.unit_files(PID, UNIT)
    assert files.version == 1
    assert files.files == {"code/a.js": b"a", "contract.json": b"{}"}


def test_a_stale_base_version_is_a_conflict(redis_store: RedisStore) -> None:
    commit(redis_store, 0, {"code/a.js": b"a"})
    stale = commit(redis_store, 0, {"code/a.js": b"b"}, role="tester")
    assert (stale.applied, stale.version, stale.reason) == (False, 1, "version conflict")
    assert redis_store.unit_files(PID, UNIT).files["code/a.js"] == b"a"


def test_a_second_commit_of_the_same_attempt_is_a_no_op(redis_store: RedisStore) -> None:
    commit(redis_store, 0, {"code/a.js": b"a"})
    again = commit(redis_store, 1, {"code/a.js": b"other"})
    assert (again.applied, again.version, again.reason) == (False, 1, "already committed")
    assert redis_store.unit_files(PID, UNIT).files["code/a.js"] == b"a"
    # Another role, or the next attempt, commits normally.
    assert commit(redis_store, 1, {"tests/a.test.js": b"t"}, role="tester").applied
    assert commit(redis_store, 2, {"code/a.js": b"a2"}, n=2).version == 3


def test_none_deletes_a_file(redis_store: RedisStore) -> None:
    commit(redis_store, 0, {"code/a.js": b"a", "code/b.js": b"b"})
    assert commit(redis_store, 1, {"code/a.js": None, "code/gone.js": None}, n=2).applied
    assert redis_store.unit_files(PID, UNIT).files == {"code/b.js": b"b"}


def test_the_cap_applies_after_the_change(redis_client: redis.Redis) -> None:
    store = RedisStore(redis_client, file_cap_bytes=100)
    store.commit_files(PID, UNIT, role="coder", attempt=1, base_version=0, changes={"a": b"x" * 60})
    with pytest.raises(FileTooLarge, match=r'unit "u1".*101 bytes.*cap of 100'):
        store.commit_files(
            PID, UNIT, role="coder", attempt=2, base_version=1, changes={"b": b"y" * 41}
        )
    assert store.unit_files(PID, UNIT).version == 1
    # Replacing the big file with a smaller one fits: the cap counts the result.
    swap = store.commit_files(
        PID, UNIT, role="coder", attempt=2, base_version=1, changes={"a": None, "b": b"y" * 90}
    )
    assert swap.applied


def test_unsafe_paths_are_refused(redis_store: RedisStore) -> None:
    for bad in ("../escape.js", "/etc/passwd", "code/../../x", ""):
        with pytest.raises(UnsafePath):
            commit(redis_store, 0, {bad: b"x"})
    assert redis_store.unit_files(PID, UNIT).version == 0


def test_binary_content_round_trips(redis_store: RedisStore) -> None:
    blob = bytes(range(256)) * 4
    commit(redis_store, 0, {"runs/r1/stdout.txt": blob})
    assert redis_store.unit_files(PID, UNIT).files["runs/r1/stdout.txt"] == blob
