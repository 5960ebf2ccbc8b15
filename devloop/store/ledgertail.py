"""Keep a folder's ledger files (bugs.ndjson, timeline.ndjson) in step with their streams by
appending what is new, not by writing them whole again.

A mark says where a file stands: the last stream entry in it, how many entries it holds
and the file as the mark left it (size, inode). A file with no mark, one that is not as its
mark left it (a person edited it, another export replaced it) or whose stream no longer
adds up (entries deleted: a reset) is written whole from its stream, as `export` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devloop.ledgers.sink import DirSink
from devloop.safe.safedir import Dir
from devloop.store.base import StoreBase
from devloop.store.export import check_target, write_atomic
from devloop.store.keys import LEDGERS
from devloop.store.streams import entry_lines
from devloop.store.synclock import folder_synced


@dataclass(frozen=True)
class LedgerMark:
    """Where one ledger file stands: its stream's last entry in it and how many entries,
    and the file's size and inode as left (-1 when there is none)."""

    last_id: str = "0-0"
    entries: int = 0
    size: int = -1
    inode: int = -1


Marks = dict[str, LedgerMark]


def follow_ledgers(store: StoreBase, pid: str, dest: Path, marks: Marks | None = None) -> Marks:
    """Bring dest's ledger files up to date with their streams; the new marks. Without
    marks (the first call) each file is written whole."""
    marks = marks or {}
    keys = store.keys(pid)
    streams = {name: keys.stream(name) for name in LEDGERS}
    with store.client.pipeline(transaction=True) as pipe:  # lengths and entries agree
        for name in LEDGERS:
            pipe.xlen(streams[name])
        pipe.xread({streams[name]: marks.get(name, LedgerMark()).last_id for name in LEDGERS})
        *lengths, reply = pipe.execute()
    fresh = {key.decode(): entries for key, entries in reply or []}
    if all(not fresh.get(streams[name]) and name in marks for name in LEDGERS):
        return marks  # nothing new: the usual look
    dest = Path(dest)
    out: Marks = {}
    with folder_synced(dest), Dir.open(dest.resolve()) as root:
        for name, length in zip(LEDGERS, lengths, strict=True):
            rel, mark = f"{name}.ndjson", marks.get(name)
            new = fresh.get(streams[name], [])
            if mark is not None and _as_left(root, rel, mark) and length == mark.entries + len(new):
                if new:
                    DirSink(root, rel).append("\n".join(_lines(new)))
                last = new[-1][0].decode() if new else mark.last_id
                out[name] = _mark(root, rel, last, length)
            else:
                out[name] = _write_whole(store, root, rel, streams[name])
    return out


def _lines(entries: list[tuple[bytes, dict[bytes, bytes]]]) -> list[str]:
    return [line for _id, fields in entries for line in entry_lines(fields)]


def _as_left(root: Dir, rel: str, mark: LedgerMark) -> bool:
    """Whether the file is still as the mark left it (a missing one: still missing)."""
    st = root.lstat(rel)
    if st is None:
        return mark.size == -1
    return (st.st_size, st.st_ino) == (mark.size, mark.inode)


def _mark(root: Dir, rel: str, last_id: str, entries: int) -> LedgerMark:
    st = root.lstat(rel)
    return LedgerMark(last_id, entries, st.st_size if st else -1, st.st_ino if st else -1)


def _write_whole(store: StoreBase, root: Dir, rel: str, stream: str) -> LedgerMark:
    """Write the file from its whole stream (as `export` does: nothing when it is empty)."""
    entries = store.client.xrange(stream)
    lines = _lines(entries)
    if lines:
        check_target(root, rel)
        write_atomic(root, rel, ("\n".join(lines) + "\n").encode("utf-8"))
    last = entries[-1][0].decode() if entries else "0-0"
    return _mark(root, rel, last, len(entries))

