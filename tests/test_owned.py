"""Tool-owned files, pure: who owns what, and how a session's change to one is judged."""

from __future__ import annotations

import pytest

from devloop.core.writeset import owned_files
from devloop.safe.owned import Found, OwnedFile, OwnedFiles


def test_each_role_owns_its_tools_records() -> None:
    assert owned_files("coder") == {
        "coder.log": ("append_coder_log", "add your decision with append_coder_log")
    }
    assert sorted(owned_files("tester", "run-2-1")) == [
        "runs/run-2-1/result.json",
        "runs/run-2-1/stderr.txt",
        "runs/run-2-1/stdout.txt",
    ]
    assert owned_files("tester") == {} and owned_files("reassess") == {}


def test_a_record_the_owner_never_wrote_allows_nothing_but_a_placeholder() -> None:
    record = OwnedFile("run_tests", "run_tests writes it")
    assert record.judge("absent") is None
    assert record.judge("file", b"") is None  # the sandbox's empty mount point
    assert record.judge("file", b"{}") == (
        "written only by run_tests; the session's file was discarded (run_tests writes it)"
    )
    assert record.judge("other") is not None


@pytest.mark.parametrize(
    ("found", "data", "done"),
    [("file", b"forged", "changed it"), ("other", None, "changed it"),
     ("absent", None, "deleted it")],
)
def test_anything_but_the_owners_bytes_is_a_change_that_is_discarded(
    found: Found, data: bytes | None, done: str
) -> None:
    record = OwnedFile("append_coder_log", "use the tool", b"---\nattempt: 1\n---\n")
    assert record.judge("file", b"---\nattempt: 1\n---\n") is None
    assert record.judge(found, data) == (
        f"written by append_coder_log; the session {done} and the change was discarded "
        "(use the tool)"
    )


def test_records_start_from_the_base_and_follow_what_the_tool_writes() -> None:
    owned = OwnedFiles(owned_files("coder"))
    owned.start({"coder.log": b"old\n", "code/a.py": b"x"})
    record = owned.get("coder.log")
    assert record is not None and record.data == b"old\n"
    owned.wrote("coder.log", b"old\nnew\n")
    assert record.data == b"old\nnew\n"
    assert owned.holder("coder.log/inside") == "coder.log" and owned.holder("code/a.py") is None
    with pytest.raises(KeyError):
        owned.wrote("code/a.py", b"y")
