"""What the embedded server may replay: its data files, checked before it starts.

A project folder may come from someone else (a cloned repository), and `.devloop/` in it
may hold an append-only file that makes the server reach outside the data when it is
replayed: MIGRATE connects to a host of the file's choosing, EVAL and FUNCTION run Lua,
MODULE loads a library. Replay runs before any client connects, so no password or ACL
stands in the way; the file itself has to be refused.

So before a server starts, every file it would load is read here: each command in it
must be one that DevLoop's own writes put there (`ALLOWED`), or the server does not
start and the error names the file, the command and the fix. A server DevLoop starts
writes plain RESP commands only (`aof-use-rdb-preamble no`), so an RDB image (which may
carry Lua function libraries, code run at load) is refused whole.

Both layouts are read: Redis 6.2's single `appendonly.aof` (what earlier versions of
DevLoop left; the server moves it into the directory on its first start) and the
directory of Redis 7 / Valkey, `appendonlydir/` with a manifest naming a base and
incremental files.
"""

from __future__ import annotations

import mmap
import os
import re
import shlex
import stat
from pathlib import Path
from typing import NoReturn

from devloop.core.errors import Problem
from devloop.safe.private import NotPrivate

AOF_NAME = "appendonly.aof"  # appendfilename in the server's config
AOF_DIR = "appendonlydir"  # appenddirname (the server's default)
MANIFEST = f"{AOF_NAME}.manifest"
SNAPSHOT = "dump.rdb"  # dbfilename: loaded at start by a server without an AOF

# Every command that DevLoop's writes leave in an AOF, in one place. Taken from the AOFs of
# real runs (stub runs of both examples and of the fleet tests: retries, blocked units,
# Ctrl-C and resume, reruns, people's commands), which hold the store's, Celery's and
# kombu's writes as the server logs them: a Lua script's effects, never the script (EVAL
# is not here); SET EX as SET PXAT, PEXPIRE as PEXPIREAT, a blocking pop as its pop, an
# expired key as DEL or UNLINK. And from what the server writes when it rewrites the AOF
# (HMSET per hash, RPUSH, SADD, ZADD, XADD and XSETID per stream, PEXPIREAT per TTL).
# tests/workers/test_resume.py::test_a_real_runs_aof_holds_only_allowed_commands_and_resumes
# checks a real run's AOF and its rewrite against it.
ALLOWED = frozenset({
    "SELECT", "MULTI", "EXEC",  # the database, and the transactions DevLoop and kombu use
    "SET", "DEL", "UNLINK", "PEXPIREAT",  # strings (states, locks, results), keys, TTLs
    "HSET", "HMSET", "HSETNX", "HDEL", "HINCRBY",  # records, unit files, counters
    "LPUSH", "RPUSH", "RPOP", "LREM", "LTRIM",  # Celery's queues, kombu's
    "SADD", "SREM", "ZADD", "ZREM",  # kombu's bindings and unacked index
    "XADD", "XSETID",  # the ledgers and event streams
    # Redis 6.2 (the server of earlier DevLoop versions) also logged each Lua script its
    # clients loaded. A current server compiles such a script and runs none of it, and
    # nothing replayed can call it (EVALSHA is not here).
    "SCRIPT LOAD",
})
# The commands whose first argument says what they do (checked as "NAME SUBCOMMAND").
_CONTAINERS = frozenset(name.split()[0].encode() for name in ALLOWED if " " in name)
_ALLOWED_BYTES = frozenset(name.encode() for name in ALLOWED)

# A command's argument count and its first argument's length; an argument's end and the
# next one's length. As the server writes them: no sign, no leading zero, no space.
_FIRST = re.compile(rb"\*([1-9][0-9]{0,8})\r\n\$(0|[1-9][0-9]{0,11})\r\n")
_NEXT = re.compile(rb"\r\n\$(0|[1-9][0-9]{0,11})\r\n")
_MANIFEST_LINE = re.compile(r"file ([A-Za-z0-9][A-Za-z0-9._-]*) seq ([1-9][0-9]{0,17}) "
                            r"type ([bhi])")
_RDB_MAGIC = (b"REDIS", b"VALKEY")


class ForeignData(NotPrivate):
    """A data file the server would load holds what DevLoop's server never writes.

    A NotPrivate: refused as an input error (exit 2), like a `.devloop/` that is not the
    user's alone; the message names the file, what is in it, and the fix.
    """


def check_data_dir(state_dir: Path, *, appendonly: bool) -> None:
    """Refuse (ForeignData) to let a server start in `state_dir` on data it did not write.

    With `appendonly`, the AOF in either layout; without, an RDB snapshot, which a
    server DevLoop starts never writes.
    """
    if not appendonly:
        if os.path.lexists(state_dir / SNAPSHOT):
            _refuse(state_dir, state_dir / SNAPSHOT, "file", "an RDB snapshot, which "
                    "DevLoop's server never writes")
        return
    if os.path.lexists(state_dir / AOF_NAME):  # Redis 6.2's layout, not yet moved
        check_aof_file(state_dir, state_dir / AOF_NAME)
    aof_dir = state_dir / AOF_DIR
    names = set()
    if os.path.lexists(aof_dir / MANIFEST):
        names.update(_manifest_files(state_dir, aof_dir / MANIFEST))
    if os.path.isdir(aof_dir):
        # Those the manifest does not name too: a server without a manifest appends to a
        # file it finds under its own next name, and loads it at the start after.
        names.update(entry.name for entry in os.scandir(aof_dir) if entry.name.endswith(".aof"))
    for name in sorted(names):
        if os.path.lexists(aof_dir / name):
            check_aof_file(state_dir, aof_dir / name)


def _manifest_files(state_dir: Path, manifest: Path) -> list[str]:
    """The files this manifest names (history files too), read strictly."""
    data = _read_regular(state_dir, manifest)
    lines = data.split(b"\n")
    if lines.pop() != b"":
        _refuse(state_dir, manifest, f"line {len(lines) + 1}", "a line that does not end, "
                "which DevLoop's server never writes")
    names = []
    for number, line in enumerate(lines, 1):
        found = _MANIFEST_LINE.fullmatch(line.decode("ascii", errors="replace"))
        if found is None:
            _refuse(state_dir, manifest, f"line {number}",
                    f"{line[:80].decode('ascii', errors='replace')!r}, not a line DevLoop's "
                    "server writes")
        names.append(found.group(1))
    return names


def check_aof_file(state_dir: Path, path: Path) -> None:
    """Refuse (ForeignData) an AOF holding a command outside ALLOWED, or not an AOF at all.

    A command the file ends inside (a server killed mid-write) is not replayed, so it
    passes.
    """
    data = _map_regular(state_dir, path)
    try:
        if data[:6].startswith(_RDB_MAGIC):
            _refuse(state_dir, path, "byte 0", "an RDB image, which DevLoop's server never "
                    "writes into its AOF (it may hold Lua libraries, run at load)")
        _check_commands(state_dir, path, data)
    finally:
        if isinstance(data, mmap.mmap):
            data.close()


def _check_commands(state_dir: Path, path: Path, data: mmap.mmap | bytes) -> None:
    """Walk the RESP commands of `data` as the server's loader does; refuse the first one
    DevLoop never writes.

    The framing is read as strictly as DevLoop's server writes it (`*N`, then N `$LEN`
    arguments, every line ended by CRLF), so a file read here as commands is read the same
    way by the server; anything looser is refused rather than guessed at. (One match per
    argument: the end of one and the length of the next are read together.)
    """
    end = len(data)
    at = count = 0
    first_at, next_at, find = _FIRST.match, _NEXT.match, data.find

    def malformed(where: int, what: str) -> NoReturn:
        _refuse(state_dir, path, f"byte {where}", f"{what} (this is not an AOF DevLoop's "
                "server wrote)")

    while at < end:
        count += 1
        start = at
        head = first_at(data, at)
        if head is None:
            if _cut_short(data, at, end, rb"\*[0-9]*(\r(\n(\$[0-9]*\r?)?)?)?"):
                return  # a header the file ends inside: the server replays nothing of it
            malformed(at, "something other than a logged command")
        at = head.end()
        stop = at + int(head[2])
        name = bytes(data[at:stop]).upper()
        for index in range(1, int(head[1])):
            following = next_at(data, stop)
            if following is None:
                if stop + 2 > end or _cut_short(data, stop, end, rb"\r\n(\$[0-9]*\r?)?"):
                    return  # cut short: a command not complete is not replayed
                if find(b"\r\n", stop, stop + 2) != stop:
                    malformed(stop, "an argument longer than its length says")
                malformed(stop + 2, "something other than a logged command argument")
            at = following.end()
            stop = at + int(following[1])
            if index == 1 and name in _CONTAINERS:
                name += b" " + bytes(data[at:stop]).upper()
        if stop + 2 > end:
            return
        if find(b"\r\n", stop, stop + 2) != stop:
            malformed(stop, "an argument longer than its length says")
        at = stop + 2
        if name not in _ALLOWED_BYTES:
            shown = name.decode("ascii", errors="replace")[:60]
            _refuse(state_dir, path, f"command {count} (byte {start})",
                    f"{shown!r}, a command DevLoop's server never writes: replayed, it could "
                    "reach outside the project's data (run code, connect out)")


def _cut_short(data: mmap.mmap | bytes, at: int, end: int, prefix: bytes) -> bool:
    """Whether the file ends at `at` or inside what `prefix` matches (a server killed there)."""
    return end - at < 64 and re.fullmatch(prefix, bytes(data[at:end])) is not None


def _open_regular(state_dir: Path, path: Path) -> int:
    """An fd of this user's regular file at `path` (no link followed), or refuse."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        _refuse(state_dir, path, "file", f"cannot be read ({exc.strerror})")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        # A second link would let the server's appends land in another file of this user's.
        _refuse(state_dir, path, "file", "is not a regular file of this user's with one link")
    return fd


def _map_regular(state_dir: Path, path: Path) -> mmap.mmap | bytes:
    """The contents of the regular file at `path`, mapped (an empty file as b"")."""
    fd = _open_regular(state_dir, path)
    try:
        if os.fstat(fd).st_size == 0:
            return b""
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _read_regular(state_dir: Path, path: Path, limit: int = 1 << 16) -> bytes:
    """The regular file at `path`, refused when larger than `limit` bytes."""
    fd = _open_regular(state_dir, path)
    try:
        data = os.read(fd, limit + 1)
        if len(data) > limit:
            _refuse(state_dir, path, "file", f"more than {limit} bytes, which DevLoop's "
                    "server never writes here")
        return data
    finally:
        os.close(fd)


def _refuse(state_dir: Path, path: Path, field: str, what: str) -> NoReturn:
    """Raise ForeignData naming the file, where in it, what is there, and the fix."""
    quoted = shlex.quote(str(state_dir))
    raise ForeignData(str(Problem(
        str(path), field, f"holds {what}; the server was not started",
        f"if this folder came from someone else, its saved state is not to be trusted: "
        f"move it away (`mv {quoted} {quoted}.untrusted`) and DevLoop starts the project's "
        "state afresh from the folder's files")))
