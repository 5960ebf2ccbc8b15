"""RedisStore: every piece of DevLoop's shared state, behind one Redis URL."""

from __future__ import annotations

from redis.backoff import ExponentialBackoff

from devloop.server.redis_server import connect
from devloop.server.redis_urls import BoundedRetry
from devloop.store.base import DEFAULT_FILE_CAP
from devloop.store.control import ControlMixin
from devloop.store.export import ExportMixin
from devloop.store.fence import Fence
from devloop.store.files import FilesMixin
from devloop.store.importer import ImportMixin
from devloop.store.keys import Ledger
from devloop.store.leases import LeasesMixin
from devloop.store.ledgerindex import LedgerIndex
from devloop.store.live import LiveMixin
from devloop.store.notices import NoticesMixin
from devloop.store.output import OutputMixin
from devloop.store.passed import PassedMixin
from devloop.store.reviews import ReviewsMixin
from devloop.store.sessions import SessionsMixin
from devloop.store.source import SourceMixin
from devloop.store.state import StateMixin
from devloop.store.steps import StepsMixin
from devloop.store.streams import RedisStreamSink, UnitLedgerSink
from devloop.store.syncreads import SyncReadsMixin
from devloop.store.wipe import WipeMixin


class RedisStore(
    ImportMixin,
    ExportMixin,
    SourceMixin,
    FilesMixin,
    PassedMixin,
    StateMixin,
    SessionsMixin,
    LeasesMixin,
    ControlMixin,
    StepsMixin,
    ReviewsMixin,
    NoticesMixin,
    LiveMixin,
    OutputMixin,
    WipeMixin,
    SyncReadsMixin,
):
    """Project record, unit files, unit state, ledgers, sessions, leases, controls and
    spend, step records, reviews, the events stream and live output in Redis."""

    @classmethod
    def from_url(cls, url: str, *, file_cap_bytes: int = DEFAULT_FILE_CAP) -> RedisStore:
        """A store over a new client of url (redis://, unix:// or redis+socket://)."""
        return cls(connect(url), file_cap_bytes=file_cap_bytes)

    @classmethod
    def watching(cls, url: str, *, file_cap_bytes: int = DEFAULT_FILE_CAP) -> RedisStore:
        """A store whose client retries briefly (three times, at most half a second apart,
        within a second): the run's own, so a dead embedded Redis is noticed (and restarted)
        at the next look, not after the workers' seventeen seconds of retries."""
        quick = BoundedRetry(ExponentialBackoff(cap=0.5, base=0.05), retries=3, budget_s=1.0)
        return cls(connect(url, retry=quick), file_cap_bytes=file_cap_bytes)

    def sink(self, pid: str, ledger: Ledger, fence: Fence | None = None) -> RedisStreamSink:
        """The append sink of a ledger ("bugs" or "timeline") of project pid (its appends
        fenced by a step's lease when one is given)."""
        keys = self.keys(pid)
        return RedisStreamSink(self.client, keys.stream(ledger), fence, LedgerIndex(keys, ledger))

    def unit_sink(self, pid: str, ledger: Ledger, unit: str) -> UnitLedgerSink:
        """One unit's entries of a ledger, read by key (appends go to the whole ledger)."""
        return UnitLedgerSink(self.sink(pid, ledger), unit)

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
