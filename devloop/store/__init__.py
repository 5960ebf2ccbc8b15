"""Redis-backed state: workers share nothing but the Redis URL.

Every key of a project starts with ``devloop:{pid}:``::

    devloop:{pid}:project                   hash    units_json, company_id, stack, conventions,
                                                    version (a digest of the others)
    devloop:{pid}:sdd                       hash    unit -> standalone SDD section (HTML)
    devloop:{pid}:contracts                 hash    unit -> SDD contract (JSON)
    devloop:{pid}:specs                     hash    unit -> spec.json (JSON, derived ones too)
    devloop:{pid}:memory                    hash    "{role}/{name}.md" -> note (memory/devloop/);
                                                    "{role}/pending/{unit}/{name}.md" till it passes
    devloop:{pid}:agent-state               hash    path under agent-state/ -> bytes
    devloop:{pid}:stream:bugs               stream  one entry per record, field "line"
    devloop:{pid}:stream:timeline           stream  (exported to bugs.ndjson, timeline.ndjson)
    devloop:{pid}:stream:events             stream  live events: every unit state write (a
                                                    cascade's: one entry per batch), runs,
                                                    pauses (the console reads it; capped)
    devloop:{pid}:unit:{unit}:files         hash    path under units/{unit}/ -> bytes
    devloop:{pid}:unit:{unit}:meta          hash    version, imported (the source folder's digest
                                                    at its last sync), known (what the folder
                                                    may hold by DevLoop's hand: store/ondisk.py)
    devloop:{pid}:unit:{unit}:commits       hash    "{role}:{attempt}" -> version it produced
    devloop:{pid}:unit:{unit}:passed        hash    code/** and contract.json as it last passed
                                                    (what its dependents' runs import)
    devloop:{pid}:unit:{unit}:state         string  UnitState (JSON)
    devloop:{pid}:session:{role}:{unit}     string  transcript checkpoint (JSON)
    devloop:{pid}:lease:{unit}:{attempt}:{role}  string with TTL: the owner
    devloop:{pid}:control                   hash    max_usd (a person's cap), default_max_usd
                                                    (DevLoop's, when no one gave a cap), paused
                                                    ("budget" | "cancelled"), paused_at, epoch
                                                    (bumped by each cancel), cancel:{unit},
                                                    reset:{unit}, spec:{unit}, console_url
    devloop:{pid}:spend                     hash    total, unit:{id}, scripted: nanodollars spent on
                                                    model calls (HINCRBY); `scripted` is the part
                                                    `--llm stub`'s turns cost
    devloop:{pid}:spent                     string  dollars an earlier DevLoop counted
                                                    (INCRBYFLOAT); still counted
    devloop:{pid}:unit:{unit}:steps         hash    "{role}:{attempt}:{try}" -> StepRecord (JSON)
    devloop:{pid}:unit:{unit}:finished      set     dependencies of unit that have passed
    devloop:{pid}:unit:{unit}:dispatched    string  set NX when unit is first released
    devloop:{pid}:unit:{unit}:approved      hash    path -> bytes: code/**, tests/**, contract.json
                                                    as last approved (what the next diff is against)
    devloop:{pid}:unit:{unit}:approved-meta hash    version, digest, attempt, by, ts
    devloop:{pid}:environment-error         string  why no session can run (a worker found it)
    devloop:{pid}:progress                  hash    unit -> StepProgress (JSON): the running
                                                    session's last step
    devloop:{pid}:llm                       string  the model of the run driving the project
    devloop:{pid}:definitions               hash    unit -> Definition (JSON): what the unit was
                                                    last run on
    devloop:{pid}:notified:{event id}       string with TTL: the webhook notifier that claimed it
    devloop:{pid}:reconcile-lock            string with TTL: a reconcile pass is under way
    devloop:{pid}:followups                 hash    unit -> what its last transition still has to
                                                    do (JSON), till done (fleet/transition.py)
    devloop:@company:{cid}:memory           hash    "{role}/{pid}--{unit}--{name}.md" -> note
                                                    promoted from any project of the company

The live side (store/live.py, output.py, wipe.py, syncreads.py, livefeed.py)::

    devloop:{pid}:output:{unit}:{run}       stream  a test run's live output: {s: stdout|stderr,
                                                    d: text}, then {end: 1} (capped per run)
    devloop:{pid}:output:{unit}:runs        list    the unit's runs with live output, newest
                                                    first (the last few)

and the fleet's records it reads or wipes (written by fleet/records, control, status,
review, respec)::

    devloop:{pid}:unit:{unit}:steps         hash    "{role}:{attempt}" -> StepRecord (JSON)
    devloop:{pid}:unit:{unit}:finished      set     the units it depends on that passed
    devloop:{pid}:unit:{unit}:dispatched    string  the unit was released (exactly once)
    devloop:{pid}:unit:{unit}:approved      hash    the files a person approved in review
    devloop:{pid}:unit:{unit}:approved-meta hash    who approved, and when
    devloop:{pid}:control                   hash    paused, max_usd, epoch, cancel:{unit},
                                                    reset:{unit}...
    devloop:{pid}:spend                     hash    total, scripted, unit:{unit} (nano-dollars)
    devloop:{pid}:spent                     string  an earlier DevLoop's float-dollar total
    devloop:{pid}:environment-error         string  why no session can run on a worker's host
    devloop:{pid}:progress                  hash    unit -> its running session's last step
    devloop:{pid}:definitions               hash    unit -> the definition its last run recorded

A unit's files carry a version bumped by every applied commit; a commit names the
version it started from and its (role, attempt), so a stale or duplicate delivery
commits nothing. Check-then-write steps run as Lua scripts or under WATCH/MULTI.

Nothing outside this package touches the Redis client or makes a key name
(tests/test_layers.py counts). A new key is a name in keys.py, a line above, and methods
on the mixin of its concern; when that concern has a protocol (protocols.py: controls and
spend, step records, reviews), MemoryStore (inmemory.py) answers it too, and a contract
test in tests/store/ runs the same assertions on both stores.
"""

from __future__ import annotations

from devloop.store.fence import Fence, LeaseLost
from devloop.store.filesets import UnsafePath
from devloop.store.keys import Keys, Ledger
from devloop.store.project import ProjectRecord, promote_memory
from devloop.store.records import (
    CommitResult,
    ImportReport,
    ProjectNotImported,
    UnitFiles,
    UnitState,
    UnitStatus,
)
from devloop.store.source import UnitSource
from devloop.store.store import RedisStore
from devloop.store.streams import RedisStreamSink

__all__ = [
    "CommitResult",
    "Fence",
    "ImportReport",
    "Keys",
    "LeaseLost",
    "Ledger",
    "ProjectNotImported",
    "ProjectRecord",
    "RedisStore",
    "RedisStreamSink",
    "UnitFiles",
    "UnitSource",
    "UnitState",
    "UnitStatus",
    "UnsafePath",
    "promote_memory",
]
