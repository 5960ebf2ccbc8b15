"""The review gate's record, on every store: an approval replaces the approved files whole
and names its attempt. Each test runs on RedisStore and on MemoryStore alike."""

from __future__ import annotations

from devloop.store import RedisStore
from devloop.store.inmemory import MemoryStore

AnyStore = RedisStore | MemoryStore


def test_a_unit_never_approved_has_no_approved_files(any_store: AnyStore) -> None:
    assert any_store.approval("p1", "u1") == ({}, None)


def test_an_approval_replaces_the_approved_files_whole(any_store: AnyStore) -> None:
    first = {"code/a.py": b"a = 1\n", "code/old.py": b"\xff\x00", "contract.json": b"{}"}
    any_store.save_approval("p1", "u1", first, {"version": 3, "attempt": 1, "by": "ann"})
    assert any_store.approval("p1", "u1") == (first, 1)
    second = {"code/a.py": b"a = 2\n"}
    any_store.save_approval("p1", "u1", second, {"version": 5, "attempt": 2, "by": "bob"})
    assert any_store.approval("p1", "u1") == (second, 2)  # code/old.py went with the rest
    any_store.save_approval("p1", "u1", {}, {"version": 6, "attempt": 3, "by": "bob"})
    assert any_store.approval("p1", "u1") == ({}, 3)
    assert any_store.approval("p1", "u2") == ({}, None)
