"""The check of a server's data files before it starts: only what DevLoop's server writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devloop.safe.private import NotPrivate
from devloop.server.redis_data import (
    ALLOWED,
    AOF_DIR,
    AOF_NAME,
    MANIFEST,
    ForeignData,
    check_data_dir,
)


def resp(*args: str | bytes) -> bytes:
    """One command as the server logs it."""
    parts = [a if isinstance(a, bytes) else a.encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


GENUINE = resp("SELECT", "0") + resp("MULTI") + resp("HSET", "h", "f", "v") + resp("EXEC")


def state_with(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A 0700 state dir holding `files` (paths relative to it)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, data in files.items():
        (state / name).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        (state / name).write_bytes(data)
    return state


def directory_layout(tmp_path: Path, incr: bytes, base: bytes = b"") -> Path:
    """The Redis 7 / Valkey layout: a manifest, an empty base and one incremental file."""
    manifest = (b"file appendonly.aof.1.base.aof seq 1 type b\n"
                b"file appendonly.aof.1.incr.aof seq 1 type i\n")
    return state_with(tmp_path, {f"{AOF_DIR}/{MANIFEST}": manifest,
                                 f"{AOF_DIR}/appendonly.aof.1.base.aof": base,
                                 f"{AOF_DIR}/appendonly.aof.1.incr.aof": incr})


def test_what_devloops_server_writes_passes_in_both_layouts(tmp_path: Path) -> None:
    check_data_dir(directory_layout(tmp_path / "7", GENUINE), appendonly=True)
    check_data_dir(state_with(tmp_path / "6", {AOF_NAME: GENUINE}), appendonly=True)
    check_data_dir(state_with(tmp_path / "none", {}), appendonly=True)


def test_the_aof_redis_6_2_wrote_for_an_earlier_devloop_passes(tmp_path: Path) -> None:
    logged = (Path(__file__).parent / "store/fixtures/redis-6.2-appendonly.aof").read_bytes()
    assert b"SCRIPT" in logged and b"MULTI" in logged  # what that server logged
    check_data_dir(state_with(tmp_path, {AOF_NAME: logged}), appendonly=True)


@pytest.mark.parametrize("planted", [
    resp("MIGRATE", "127.0.0.1", "6379", "", "0", "5000", "KEYS", "x"),
    resp("EVAL", "redis.call('SET', 'pwned', '1')", "0"),
    resp("eval", "return 1", "0"),  # names are case-insensitive to the server
    resp("EVALSHA", "0" * 40, "0"),
    resp("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('f', function() end)"),
    resp("FCALL", "f", "0"),
    resp("MODULE", "LOAD", "/tmp/evil.so"),
    resp("CONFIG", "SET", "dir", "/root/.ssh"),
    resp("SLAVEOF", "127.0.0.1", "6379"),
    resp("RESTORE", "k", "0", b"\x00\x01"),
    resp("SCRIPT", "FLUSH"),
    resp("XGROUP"),  # a container without its subcommand
    resp("SET\x00MIGRATE", "k", "v"),  # what the server's lookup might cut at the NUL
], ids=lambda planted: planted.split(b"\r\n")[2].decode(errors="replace"))
def test_a_command_devloop_never_writes_is_refused_with_the_file_command_and_fix(
    tmp_path: Path, planted: bytes
) -> None:
    state = directory_layout(tmp_path, GENUINE + planted + GENUINE)
    with pytest.raises(ForeignData) as refused:
        check_data_dir(state, appendonly=True)
    message = str(refused.value)
    name = planted.split(b"\r\n")[2].decode(errors="replace").upper()
    assert message.startswith(f"{state / AOF_DIR}/appendonly.aof.1.incr.aof: command 5 "
                              f"(byte {len(GENUINE)}): holds '{repr(name)[1:-1]}")
    assert "fix: if this folder came from someone else" in message
    assert f"`mv {state} {state}.untrusted`" in message
    assert isinstance(refused.value, NotPrivate)  # an input error wherever NotPrivate is


def test_the_legacy_single_file_is_checked_as_well(tmp_path: Path) -> None:
    state = state_with(tmp_path, {AOF_NAME: GENUINE + resp("EVAL", "return 1", "0")})
    with pytest.raises(ForeignData, match=f"^{state / AOF_NAME}: command 5 .*'EVAL'"):
        check_data_dir(state, appendonly=True)


@pytest.mark.parametrize(("tail", "at"), [
    (b"#TS:1700000000\r\n", 0),  # an annotation the server skips: never ours
    (b"SET inline command\r\n", 0),  # the inline form
    (b"*-1\r\n", 0),
    (b"*0\r\n", 0),
    (b"*1\r\n$05\r\nMULTI\r\n", 0),  # a leading zero the server's strtol would take
    (b"*2\r\n$3\r\nSETX\r\n$1\r\nk\r\n", 11),  # an argument longer than its length says
])
def test_anything_framed_unlike_the_servers_own_log_is_refused(
    tmp_path: Path, tail: bytes, at: int
) -> None:
    state = directory_layout(tmp_path, GENUINE + tail + GENUINE)
    with pytest.raises(ForeignData, match=f"incr.aof: byte {len(GENUINE) + at}: holds "):
        check_data_dir(state, appendonly=True)


@pytest.mark.parametrize("cut", range(1, len(resp("HSET", "h", "f", "v"))))
def test_a_command_the_file_ends_inside_passes_since_it_is_never_replayed(
    tmp_path: Path, cut: int
) -> None:
    state = directory_layout(tmp_path, GENUINE + resp("HSET", "h", "f", "v")[:cut])
    check_data_dir(state, appendonly=True)


def test_a_planted_command_is_refused_exactly_when_the_file_holds_all_of_it(
    tmp_path: Path
) -> None:
    logged = GENUINE + resp("EVAL", "return 1", "0")
    for cut in range(len(GENUINE), len(logged) + 1):
        state = directory_layout(tmp_path / str(cut), logged[:cut])
        if cut < len(logged):
            check_data_dir(state, appendonly=True)  # the server would not replay a part
        else:
            with pytest.raises(ForeignData, match="'EVAL'"):
                check_data_dir(state, appendonly=True)


@pytest.mark.parametrize("magic", [b"REDIS0011", b"VALKEY080"])
def test_an_rdb_image_in_the_aof_is_refused(tmp_path: Path, magic: bytes) -> None:
    state = directory_layout(tmp_path, GENUINE, base=magic + b"\xfa\x09redis-ver")
    with pytest.raises(ForeignData, match=r"base.aof: byte 0: holds an RDB image"):
        check_data_dir(state, appendonly=True)


@pytest.mark.parametrize("line", [
    b"file ../../etc/evil.aof seq 1 type i\n",  # a path, not a name in the dir
    b'file "a b.aof" seq 1 type i\n',  # quoting the server's parser would take
    b"file appendonly.aof.2.incr.aof seq 2 type i startoffset 0\n",  # keys it never writes
    b"# a comment\n",
    b"file appendonly.aof.2.incr.aof seq 2 type i",  # no newline at the end
])
def test_a_manifest_line_the_server_never_writes_is_refused(tmp_path: Path, line: bytes) -> None:
    state = directory_layout(tmp_path, GENUINE)
    with (state / AOF_DIR / MANIFEST).open("ab") as manifest:
        manifest.write(line)
    with pytest.raises(ForeignData, match=f"^{state / AOF_DIR / MANIFEST}: line 3"):
        check_data_dir(state, appendonly=True)


@pytest.mark.parametrize("manifest", [True, False])
def test_every_aof_in_the_directory_is_checked_named_in_the_manifest_or_not(
    tmp_path: Path, manifest: bool
) -> None:
    state = directory_layout(tmp_path, GENUINE)
    if not manifest:  # a server finding none appends to its next file, and loads it later
        (state / AOF_DIR / MANIFEST).unlink()
    (state / AOF_DIR / "appendonly.aof.2.incr.aof").write_bytes(resp("EVAL", "1", "0"))
    with pytest.raises(ForeignData, match=r"appendonly.aof.2.incr.aof: command 1 .*'EVAL'"):
        check_data_dir(state, appendonly=True)


def test_a_snapshot_is_refused_for_a_server_without_an_aof(tmp_path: Path) -> None:
    state = state_with(tmp_path, {"dump.rdb": b"REDIS0011"})
    check_data_dir(state, appendonly=True)  # a server with an AOF never loads it
    with pytest.raises(ForeignData, match=r"dump.rdb: file: holds an RDB snapshot"):
        check_data_dir(state, appendonly=False)


def test_a_link_fifo_or_hard_link_in_place_of_an_aof_is_refused(tmp_path: Path) -> None:
    state = state_with(tmp_path, {})
    (state / AOF_NAME).symlink_to(tmp_path / "elsewhere.aof")
    with pytest.raises(ForeignData, match="cannot be read"):
        check_data_dir(state, appendonly=True)
    (state / AOF_NAME).unlink()
    os.mkfifo(state / AOF_NAME)
    with pytest.raises(ForeignData, match="not a regular file"):
        check_data_dir(state, appendonly=True)
    (state / AOF_NAME).unlink()
    (tmp_path / "profile").write_bytes(b"")
    os.link(tmp_path / "profile", state / AOF_NAME)  # the server would append to it
    with pytest.raises(ForeignData, match="with one link"):
        check_data_dir(state, appendonly=True)


def test_every_allowed_command_is_a_name_or_a_name_and_subcommand() -> None:
    assert all(name == name.upper() and len(name.split()) in (1, 2) for name in ALLOWED)
    assert not {"EVAL", "EVALSHA", "FCALL", "FUNCTION LOAD", "MIGRATE", "MODULE LOAD",
                "CONFIG SET", "RESTORE", "SLAVEOF", "REPLICAOF"} & ALLOWED
