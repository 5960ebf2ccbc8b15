"""The state every part of RedisStore shares: the client, the size cap, the scripts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from devloop.store import scripts
from devloop.store.keys import Keys

if TYPE_CHECKING:
    from devloop.store.project import ProjectRecord

DEFAULT_FILE_CAP = 20 * 1024 * 1024

# What a store call raises when Redis fails, and when it cannot be reached at all (a
# restart, a dropped connection): code outside the store catches these, never the
# client's own types.
StoreError = redis.RedisError
StoreUnavailable = redis.ConnectionError


class StoreBase:
    """A bytes-mode redis-py client, the per-unit size cap and the registered scripts."""

    def __init__(self, client: redis.Redis, *, file_cap_bytes: int = DEFAULT_FILE_CAP) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            # Unit files are bytes; a decoding client would corrupt any non-UTF-8 file.
            raise ValueError("RedisStore needs a client with decode_responses=False")
        self.client = client
        self.file_cap_bytes = file_cap_bytes
        self._commit_files = client.register_script(scripts.COMMIT_FILES)
        self._cas_state = client.register_script(scripts.CAS_STATE)
        self._swap_followup = client.register_script(scripts.SWAP_FOLLOWUP)
        self._acquire_lease = client.register_script(scripts.ACQUIRE_LEASE)
        self._heartbeat_lease = client.register_script(scripts.HEARTBEAT_LEASE)
        self._release_lease = client.register_script(scripts.RELEASE_LEASE)
        # (pid, version) -> the parsed project record: see ProjectMixin.project_record.
        self._records: dict[tuple[str, bytes], ProjectRecord] = {}

    def keys(self, pid: str) -> Keys:
        """The key names of project pid."""
        return Keys(pid)


def text(value: bytes | str | None) -> str | None:
    """A reply as str (None stays None)."""
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else value


def decode_hash(raw: dict[bytes, bytes]) -> dict[str, bytes]:
    """An HGETALL reply with str fields and bytes values."""
    return {k.decode("utf-8"): v for k, v in raw.items()}
