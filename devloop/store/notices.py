"""Following the projects' live events and claiming one notice per event (the webhook)."""

from __future__ import annotations

from devloop.store.base import StoreBase

Event = tuple[str, str, dict[bytes, bytes]]  # (pid, event id, fields)


class NoticesMixin(StoreBase):
    """`last_event_id`, `read_events`, `claim_notice` and `drop_notice_claim`."""

    def last_event_id(self, pid: str) -> str:
        """The id of the project's newest live event ("0-0": none yet)."""
        last = self.client.xrevrange(self.keys(pid).events, count=1)
        return last[0][0].decode() if last else "0-0"

    def read_events(self, after: dict[str, str], block_ms: int, count: int) -> list[Event]:
        """The live events of the projects after each one's id (pid -> id), waiting up to
        block_ms for one; oldest first per project."""
        by_key = {self.keys(pid).events: pid for pid in after}
        replies = self.client.xread({k: after[p] for k, p in by_key.items()},
                                    block=block_ms, count=count)
        events = []
        for key, entries in replies or []:
            pid = by_key[key.decode() if isinstance(key, bytes) else key]
            events += [(pid, entry_id.decode(), fields) for entry_id, fields in entries]
        return events

    def claim_notice(self, pid: str, event_id: str, ttl_s: int) -> bool:
        """Claim the notice of one event for ttl_s; False when another notifier has it."""
        return bool(self.client.set(self.keys(pid).notified(event_id), "1", nx=True, ex=ttl_s))

    def drop_notice_claim(self, pid: str, event_id: str) -> None:
        """Give a claim up (its call failed: another notifier may try)."""
        self.client.delete(self.keys(pid).notified(event_id))
