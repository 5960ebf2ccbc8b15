"""coder.log: the seed's block format, tolerant reading, refusals, concurrent appends."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devloop.core.models import CoderDecision
from devloop.ledgers.coderlog import (
    DecisionInvalid,
    append_decision,
    format_decision,
    parse_coder_log,
    read_decisions,
)
from devloop.ledgers.sink import FileSink

# The reflection template of coder-agent-spec.txt, verbatim (there it is indented by two).
SEED_BLOCK = """\
---
attempt: 2
ts: 2026-05-13T10:32:08Z
last_failure: login.invalid-pwd 期望 401 收 500
last_cause: 没处理 user 不存在,直接 bcrypt.compare(null,...) 抛 TypeError
this_fix: service.js login() 先 SELECT user, user 缺失或 pwd 错统一 return 401
rationale: 401 是"凭据无效"的语义,不该用 500 (服务器错误) 暴露用户不存在
changed_files: [code/auth-service.js]
---
"""

SEED_DECISION = CoderDecision(
    attempt=2,
    ts="2026-05-13T10:32:08Z",
    last_failure="login.invalid-pwd 期望 401 收 500",
    last_cause="没处理 user 不存在,直接 bcrypt.compare(null,...) 抛 TypeError",
    this_fix="service.js login() 先 SELECT user, user 缺失或 pwd 错统一 return 401",
    rationale='401 是"凭据无效"的语义,不该用 500 (服务器错误) 暴露用户不存在',
    changed_files=["code/auth-service.js"],
)

# The implement-mode call of the spec's worked example (no ts: the writer stamps it).
IMPLEMENT: dict[str, Any] = {
    "attempt": 1,
    "this_fix": "首次实现 todo-be:Express + better-sqlite3 内存库 + 双端点",
    "rationale": "按 SDD 拆 server/service 双层; 内存库便于 Tester 跑 vitest",
    "changed_files": ["code/server.js", "code/service.js"],
}


def clock() -> datetime:
    return datetime(2026, 5, 13, 10, 30, 0, tzinfo=UTC)


def test_format_decision_writes_the_seed_block_with_json_lists() -> None:
    assert (
        format_decision(SEED_DECISION)
        == SEED_BLOCK.replace("[code/auth-service.js]", '["code/auth-service.js"]') + "\n"
    )


def test_format_puts_model_fields_first_then_extras_and_omits_none() -> None:
    decision = CoderDecision.model_validate(
        {"tokens": 812, "changed_files": ["a.js", "b.js"], "rationale": "r: why", "ts": "T"}
        | {"this_fix": "f", "attempt": 1, "last_cause": None, "tags": ["x"], "meta": {"k": 1}}
    )
    assert format_decision(decision) == (
        "---\n"
        "attempt: 1\n"
        "ts: T\n"
        "this_fix: f\n"
        "rationale: r: why\n"
        'changed_files: ["a.js","b.js"]\n'
        "tokens: 812\n"
        'tags: ["x"]\n'
        'meta: {"k":1}\n'
        "---\n\n"
    )


@pytest.mark.parametrize("indent", ["", "  "])
def test_parse_reads_the_seed_block_with_its_unquoted_list(indent: str) -> None:
    text = "".join(indent + line for line in SEED_BLOCK.splitlines(keepends=True))
    assert parse_coder_log(text) == [SEED_DECISION]


def test_formatted_decisions_parse_back_to_equal_models() -> None:
    tricky = [
        SEED_DECISION,
        CoderDecision.model_validate(IMPLEMENT | {"ts": "2026-05-13T10:30:00Z"}),
        CoderDecision(
            attempt=3,
            ts="2026-05-13T10:40:00Z",
            last_failure='"quoted whole"',
            last_cause="  leading and trailing spaces  ",
            this_fix="line one\nline two: with colon\n---\nkey: not a key",
            rationale="[not a list] but text",
            changed_files=["code/a, with comma.js", "代码/服务.js"],
            tokens="42",
            note="[wip]",
            flags=[True, None, 1.5],
            empty="",
        ),
    ]
    text = "".join(format_decision(d) for d in tricky)
    assert parse_coder_log(text) == tricky
    assert parse_coder_log(text)[2].model_extra == {
        "tokens": "42",
        "note": "[wip]",
        "flags": [True, None, 1.5],
        "empty": "",
    }


def test_parse_tolerates_other_writers() -> None:
    text = (
        "preamble the model wrote\n"
        "---\n"
        "attempt: 1\n"
        "ts: 2026-05-13T10:30:00Z\n"
        "this_fix: first line\n"
        "  continued on a second line\n"
        "rationale: url http://x:8080/a: ok\n"
        "changed_files: code/only.js\n"
        "reviewer: 张三\n"
        "---\n"
        "\n"
        "---\n"
        "attempt: 2\n"
        "this_fix: unfinished block, still being written\n"
    )
    (decision,) = parse_coder_log(text)
    assert decision.this_fix == "first line\ncontinued on a second line"
    assert decision.rationale == "url http://x:8080/a: ok"
    assert decision.changed_files == ["code/only.js"]
    assert decision.model_extra == {"reviewer": "张三"}


def test_invalid_blocks_are_skipped_or_refused_when_strict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "---\nattempt: 1\nthis_fix: f\nrationale: r\n---\n"
    with caplog.at_level(logging.WARNING):
        assert parse_coder_log(text) == []
    assert "block at line 1" in caplog.text
    with pytest.raises(DecisionInvalid, match="missing fields: changed_files") as caught:
        parse_coder_log(text, strict=True)
    assert caught.value.missing == ["changed_files"]


def test_a_block_without_ts_is_read_like_the_seed_writes_it() -> None:
    text = "---\nattempt: 1\nthis_fix: f\nrationale: r\nchanged_files: [a.js]\n---\n"
    [decision] = parse_coder_log(text)
    assert decision.ts is None and decision.changed_files == ["a.js"]


def test_append_stamps_ts_and_writes_exactly_one_block(tmp_path: Path) -> None:
    path = tmp_path / "units" / "todo-be" / "coder.log"
    written = append_decision(path, IMPLEMENT, now=clock)
    assert written.ts == "2026-05-13T10:30:00Z"
    assert path.read_text(encoding="utf-8") == (
        "---\n"
        "attempt: 1\n"
        "ts: 2026-05-13T10:30:00Z\n"
        "this_fix: 首次实现 todo-be:Express + better-sqlite3 内存库 + 双端点\n"
        "rationale: 按 SDD 拆 server/service 双层; 内存库便于 Tester 跑 vitest\n"
        'changed_files: ["code/server.js","code/service.js"]\n'
        "---\n\n"
    )
    append_decision(FileSink(path), SEED_DECISION)  # a model and a sink work too; ts kept
    assert read_decisions(path) == [written, SEED_DECISION]


def test_read_decisions_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert read_decisions(tmp_path / "coder.log") == []


@pytest.mark.parametrize(
    ("decision", "missing"),
    [
        (IMPLEMENT | {"attempt": 2, "last_failure": "x 期望 401 收 500"}, ["last_cause"]),
        (IMPLEMENT | {"attempt": 2}, ["last_failure", "last_cause"]),
        (IMPLEMENT | {"changed_files": []}, ["changed_files"]),
        (IMPLEMENT | {"this_fix": "   "}, ["this_fix"]),
        (
            {"attempt": 3, "last_cause": "c"},
            ["this_fix", "rationale", "changed_files", "last_failure"],
        ),
        ({}, ["attempt", "this_fix", "rationale", "changed_files"]),
    ],
)
def test_incomplete_decisions_are_refused_and_nothing_is_written(
    tmp_path: Path, decision: dict[str, Any], missing: list[str]
) -> None:
    path = tmp_path / "coder.log"
    with pytest.raises(DecisionInvalid) as caught:
        append_decision(path, decision)
    assert caught.value.missing == missing
    assert str(caught.value) == f"coder.log decision missing fields: {', '.join(missing)}"
    assert not path.exists()


def test_an_attempt_started_from_implement_again_needs_no_reflection(tmp_path: Path) -> None:
    # A scripted pass built again by a real model: attempt 2, but no failure behind it.
    written = append_decision(tmp_path / "coder.log", IMPLEMENT | {"attempt": 2}, retry=False)
    assert written.attempt == 2 and written.last_failure is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"attempt": "two"}, "attempt must be a positive integer"),
        ({"attempt": -1}, "attempt must be a positive integer"),
        ({"changed_files": "code/a.js"}, "changed_files"),
        ({"bad key": 1}, "keys must look like identifiers"),
    ],
)
def test_malformed_decisions_are_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(DecisionInvalid, match=message):
        append_decision(tmp_path / "coder.log", IMPLEMENT | change)
    assert not (tmp_path / "coder.log").exists()


def test_a_retry_with_its_reflection_is_accepted(tmp_path: Path) -> None:
    data = SEED_DECISION.to_json_dict()
    del data["ts"]
    written = append_decision(tmp_path / "coder.log", data, now=clock)
    assert written.last_cause == SEED_DECISION.last_cause
    assert "没处理 user 不存在" in (tmp_path / "coder.log").read_text(encoding="utf-8")


WRITER = r"""
import os, sys, time
from devloop.ledgers.coderlog import append_decision

go, path, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
print("ready", flush=True)
deadline = time.monotonic() + 60  # bounded: a lost "go" ends the writer, not the suite
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no go file within 60 s")
    time.sleep(0.001)
for i in range(count):
    # every fifth block carries ~12 KB of Chinese text (3 bytes a character)
    size = 4_000 if i % 5 == 0 else 10 + i
    append_decision(path, {
        "attempt": i + 2, "last_failure": f"w{worker} 失败 {i}", "last_cause": "原因: x",
        "this_fix": f"{worker}:{i}", "rationale": "理" * size,
        "changed_files": [f"code/w{worker}.js"], "size": size,
    })
"""


def test_blocks_from_eight_processes_at_once_stay_whole(tmp_path: Path) -> None:
    path, go, workers, count = tmp_path / "coder.log", tmp_path / "go", 8, 50
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(go), str(path), str(w), str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        go.touch()
        for proc in procs:
            _out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()

    decisions = parse_coder_log(path.read_text(encoding="utf-8"), strict=True)
    assert len(decisions) == workers * count
    seen = set()
    for d in decisions:
        worker, i = map(int, d.this_fix.split(":"))
        size = (d.model_extra or {})["size"]
        assert d.rationale == "理" * size
        assert (d.attempt, d.changed_files) == (i + 2, [f"code/w{worker}.js"])
        seen.add((worker, i))
    assert seen == {(w, i) for w in range(workers) for i in range(count)}
