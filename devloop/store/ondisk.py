"""What a project folder may hold of a unit by DevLoop's own hand, and so what is the user's.

`devloop run` keeps the folder it imported from in sync with Redis. An import must tell a
user's edit from a file DevLoop wrote itself, including the state an export leaves when it
is killed halfway (some files new, some old) or a commit lands while it writes. So each
unit's meta keeps `known`: for every path DevLoop may have left in the folder, each content
it may hold there (a sha256, or ABSENT when DevLoop may equally have left nothing). An
export widens it before it writes and narrows it to what it wrote once it is done; so at
every instant the folder's DevLoop-made files are in `known`, and whatever is not is the
user's, who wins for those paths only. A torn export is then no edit at all, and no
committed file is lost to it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

ABSENT = ""
# A temporary file of write_atomic: `.{name}.{16 hex}.tmp`. Under the folder's sync lock one
# that is still there was left by a killed writer; an import never reads one as a file.
TEMP_NAME = re.compile(r"\..+\.[0-9a-f]{16}\.tmp")
Known = dict[str, list[str]]  # path -> every content DevLoop may have left there


def sha(data: bytes) -> str:
    """The content's sha256, hex."""
    return hashlib.sha256(data).hexdigest()


def known_of(files: Mapping[str, bytes]) -> Known:
    """The folder holds exactly these files by DevLoop's hand."""
    return {rel: [sha(data)] for rel, data in files.items()}


def widened(before: Known, writes: Mapping[str, bytes], removals: Iterable[str]) -> Known:
    """What the folder may hold while an export writes `writes` and removes `removals`:
    each path's old contents, or its new one."""
    known = {rel: list(shas) for rel, shas in before.items()}
    for rel, data in writes.items():
        was = known.get(rel, [ABSENT])
        known[rel] = sorted({*was, sha(data)})
    for rel in removals:
        known[rel] = sorted({*known.get(rel, [ABSENT]), ABSENT})
    return known


def is_devloops(rel: str, data: bytes, known: Known) -> bool:
    """Whether DevLoop may have left exactly this content at rel."""
    return sha(data) in known.get(rel, [ABSENT])


def user_changes(
    folder: Mapping[str, bytes], known: Known, current: Mapping[str, bytes]
) -> dict[str, bytes | None]:
    """The user's edits of a unit folder, as changes to Redis's files (None deletes).

    A file DevLoop may have left there is not an edit, whatever Redis holds now; nor is
    one equal to Redis's. A path DevLoop left a file at, that the folder no longer has,
    was deleted by the user.
    """
    changes: dict[str, bytes | None] = {
        rel: data
        for rel, data in folder.items()
        if not is_devloops(rel, data, known) and current.get(rel) != data
    }
    for rel, shas in known.items():
        if rel not in folder and ABSENT not in shas and rel in current:
            changes[rel] = None
    return changes


def applied(current: Mapping[str, bytes], changes: Mapping[str, bytes | None]) -> dict[str, bytes]:
    """current with changes made."""
    files = dict(current)
    for rel, data in changes.items():
        if data is None:
            files.pop(rel, None)
        else:
            files[rel] = data
    return files


def encode(known: Known) -> bytes:
    """known as stored in the unit's meta."""
    return json.dumps(known, sort_keys=True, separators=(",", ":")).encode()


def decode(raw: bytes | None) -> Known:
    """known from the unit's meta; empty (nothing is known to be DevLoop's) when absent or
    not of that shape, which only makes more of the folder count as the user's."""
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {
        rel: [s for s in shas if isinstance(s, str)]
        for rel, shas in value.items()
        if isinstance(rel, str) and isinstance(shas, list)
    }
