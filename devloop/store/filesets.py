"""A unit's file set: safe relative paths, a content digest, and the size cap's error."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from devloop.core.errors import DevLoopError, FileTooLarge
from devloop.safe.safedir import Dir
from devloop.safe.safetree import walk

CAP_SETTING = "DEVLOOP_FILE_CAP_BYTES"


class UnsafePath(DevLoopError):
    """A stored path would land outside its directory (absolute, `..`, empty)."""


def safe_relpath(path: str) -> PurePosixPath:
    """path as a relative posix path that stays inside its base; UnsafePath otherwise."""
    pure = PurePosixPath(path)
    if (
        not path
        or "\x00" in path
        or pure.is_absolute()
        or any(part in ("..", "") for part in pure.parts)
        or pure == PurePosixPath(".")
    ):
        raise UnsafePath(f"unsafe path {path!r}: it must be relative and must not contain '..'")
    return pure


def files_digest(files: Mapping[str, bytes]) -> str:
    """sha256 of a file set: sorted paths and contents, each length-prefixed."""
    h = hashlib.sha256()
    for path in sorted(files):
        name = path.encode("utf-8")
        h.update(len(name).to_bytes(8, "big") + name)
        h.update(len(files[path]).to_bytes(8, "big") + files[path])
    return h.hexdigest()


def too_large(pid: str, unit: str, size: int, cap: int, sizes: Mapping[str, int]) -> FileTooLarge:
    """The error for a unit past the cap, naming its largest files and the setting."""
    biggest = sorted(sizes.items(), key=lambda item: -item[1])[:3]
    listed = ", ".join(f"{path} ({n} bytes)" for path, n in biggest)
    return FileTooLarge(
        f'project "{pid}" unit "{unit}": its files total {size} bytes, over the cap of '
        f"{cap} bytes (largest: {listed or 'none'}); remove large files from "
        f"units/{unit}/ or raise {CAP_SETTING}"
    )


def code_digest(view: Path, unit_rel: str) -> str | None:
    """The digest of the unit's code/** in the view (None when it cannot be read whole):
    which code a verdict is about. Tester runs cannot change code/, so after the run is the
    same as before it."""
    try:
        with Dir.open(view) as root:
            entries = [e for e in walk(root, f"{unit_rel}/code") if e.kind == "file"]
            if any(e.problem for e in entries):
                return None
            return files_digest({
                f"code/{e.rel}": root.read_bytes(f"{unit_rel}/code/{e.rel}") for e in entries
            })
    except FileNotFoundError:
        return files_digest({})
    except OSError:  # TooMany, a link, a fifo: not a code set anyone can commit
        return None
