"""Trees beneath a `Dir`: a bounded walk and a removal, both iterative, neither following links.

A session may leave a 1,000-deep tree, 100,000 files or names that are not UTF-8; `walk`
reports those as problems instead of raising or reading them all, and `remove_tree`
removes any of them (recursion would hit Python's limit; it also opens one directory at
a time, so depth never costs file descriptors).
"""

from __future__ import annotations

import os
import stat
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from devloop.safe.removal import remove_entry
from devloop.safe.safedir import Dir, Refused, parts_of


@dataclass(frozen=True)
class Limits:
    """How much of a tree a walk reads: entries in all, depth and path length (bytes)."""

    entries: int = 2000
    depth: int = 32
    path_bytes: int = 1024


@dataclass(frozen=True)
class Entry:
    """One entry of a walk; `problem` says why it (and anything below it) was not read."""

    rel: str  # relative to the walked dir; a name that is not UTF-8 is shown escaped
    kind: str  # "file" | "dir" | "symlink" | "other"
    size: int = 0
    mtime_ns: int = 0
    problem: str | None = None


def kind_of(mode: int) -> str:
    """file, dir, symlink or other (fifo, socket, device)."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "symlink" if stat.S_ISLNK(mode) else "other"


def printable(name: str) -> str:
    """A name as text that can be shown anywhere: undecodable bytes and controls escaped."""
    raw = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if unicodedata.category(c) != "Cc" else repr(c)[1:-1] for c in raw)


def name_problem(name: str) -> str | None:
    """Why a file name is refused: not valid UTF-8, or holding control characters."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid UTF-8"
    if any(unicodedata.category(c) == "Cc" for c in name):
        return "name contains control characters"
    return None


class TooMany(Refused):
    """A walk met more entries than its limit allows; nothing past the limit was read."""


def walk(root: Dir, rel: str = "", limits: Limits = Limits()) -> Iterator[Entry]:
    """Every entry under root/rel, depth first in name order, without following links.

    Names that are not UTF-8 or hold control characters, paths deeper or longer than
    the limits, and directories that cannot be opened come back as entries with a
    `problem` and are not descended into. More than `limits.entries` entries raise
    TooMany: the walk never reads an unbounded tree.
    """
    base = "/".join(parts_of(rel))
    stack = [("", 0)]
    seen = 0
    while stack:
        prefix, depth = stack.pop()
        try:
            here = root.opendir(f"{base}/{prefix}".strip("/"))
        except OSError as exc:
            yield Entry(prefix, "other", problem=f"cannot be read ({_why(exc)})")
            continue
        with here:
            names = _names(here, limits.entries - seen)
            if names is None:
                raise TooMany(base or ".", f"holds more than {limits.entries} entries")
            if depth >= limits.depth and names:
                yield Entry(prefix, "dir", problem=f"is more than {limits.depth} levels deep")
                continue
            seen += len(names)
            subdirs = []
            for name in sorted(names):
                path = f"{prefix}/{name}" if prefix else name
                try:
                    st = os.stat(name, dir_fd=here.fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                kind = kind_of(st.st_mode)
                problem = name_problem(name)
                if problem is None and len(os.fsencode(path)) > limits.path_bytes:
                    problem = f"path is longer than {limits.path_bytes} bytes"
                shown = path if problem is None else printable(path)
                yield Entry(shown, kind, st.st_size, st.st_mtime_ns, problem)
                if kind == "dir" and problem is None:
                    subdirs.append(path)
            stack += [(path, depth + 1) for path in reversed(subdirs)]


def _why(exc: OSError) -> str:
    return exc.reason if isinstance(exc, Refused) else exc.strerror or str(exc)


def _names(here: Dir, budget: int) -> list[str] | None:
    """The names in a directory, or None when there are more than `budget`."""
    names: list[str] = []
    with os.scandir(here.fd) as entries:
        for entry in entries:
            if len(names) >= budget:
                return None
            names.append(entry.name)
    return names


def remove_tree(root: Dir, rel: str) -> None:
    """Remove root/rel and everything under it (a file or link: just it); missing is fine.

    Iterative, one open directory at a time; directories the sandbox made unreadable or
    unwritable are given back to their owner first.
    """
    parts = parts_of(rel)
    if not parts:
        raise Refused(rel or ".", "remove_tree needs an entry, not the directory itself")
    with root.opendir("/".join(parts[:-1])) as parent:
        name = parts[-1]
        remove_entry(parent.fd, name)
