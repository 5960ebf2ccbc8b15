"""Keep the project folder in step with Redis while a run goes on, writing what changed.

`start` exports everything once. Each `sync` after a look of the live status writes the
files of the units whose version moved (and their agent-state files), appends the ledgers'
new entries and the new step records, rewrites spend.json when the spend moved (at most
every SPEND_EVERY_S) and goes through a slice of the agent-state and memory notes in
turn, so what no unit's change brought along still lands within a sweep. `finish` exports
everything again, exactly (the end of a run, as before).
"""

from __future__ import annotations

import time
from pathlib import Path

from devloop.core.money import from_nano
from devloop.fleet.control import export_spend, write_spend
from devloop.fleet.livestatus import LiveStatus, Look
from devloop.fleet.marks import export_marks
from devloop.fleet.records import StepRecord, append_steps, export_steps, write_steps
from devloop.fleet.wipe import agent_state_names
from devloop.safe.safedir import Dir
from devloop.store import RedisStore
from devloop.store.export import check_target, write_atomic
from devloop.store.filesets import safe_relpath
from devloop.store.ledgertail import Marks, follow_ledgers
from devloop.store.snapshot import AGENT_STATE_DIR, MEMORY_DIR
from devloop.store.synclock import folder_synced

SPEND_EVERY_S = 5.0
SWEEP_MIN = 50  # agent-state and memory fields looked at per sync, at least (HSCAN COUNT)


class FolderSync:
    """Exports a running project into its folder, as its live status moves."""

    def __init__(self, store: RedisStore, pid: str, folder: Path) -> None:
        self.store, self.pid, self.folder = store, pid, Path(folder)
        self.exported: dict[str, int] = {}  # unit -> the files' version exported
        self.ledgers: Marks = {}
        self.written: dict[str, bytes] = {}  # agent-state/memory file -> bytes written
        self.cursors = (0, 0)  # where the sweep stands in agent-state and in memory
        self.spend_at, self.spend_usd = 0.0, -1.0
        self.steps: list[StepRecord] = []  # step records to append

    def start(self, live: LiveStatus) -> None:
        """Export everything once (the live status loaded)."""
        state, memory = self.store.agent_state_and_memory(self.pid)
        # Read before the export writes them: the sweep compares with these, not the disk
        # (one changed since is found different, and then compared with the disk).
        self.written = {f"{base}/{rel}": data
                        for base, files in ((AGENT_STATE_DIR, state), (MEMORY_DIR, memory))
                        for rel, data in files.items()}
        self.store.export(self.pid, self.folder, as_source=True)
        self.exported = live.versions
        self.ledgers = follow_ledgers(self.store, self.pid, self.folder)
        write_steps(self.folder, sorted((r for i in live.inputs.values() for r in i.steps),
                                        key=lambda r: r.started_at))
        self._spend(live, force=True)

    def sync(self, live: LiveStatus, look: Look) -> None:
        """Write what the look found changed, and the next slice of agent state and notes.

        A sync cut short (Redis went away) leaves what it did not write for the next one.
        """
        self.steps += look.steps
        moved = {unit: inputs.version for unit, inputs in live.inputs.items()
                 if self.exported.get(unit) != inputs.version}
        if moved:
            self.store.export(self.pid, self.folder, as_source=True, units=list(moved))
            self.exported.update(moved)
        if look.units:
            names = [name for unit in look.units for name in agent_state_names(unit)]
            self._write(AGENT_STATE_DIR, self.store.agent_state_files(self.pid, names))
        self.ledgers = follow_ledgers(self.store, self.pid, self.folder, self.ledgers)
        if self.steps:
            append_steps(self.folder, sorted(self.steps, key=lambda r: r.started_at))
            self.steps = []
        self._spend(live)
        self._sweep(len(live.units))

    def finish(self, every_run_scripted: bool) -> None:
        """Export everything, exactly (the run's end)."""
        export_marks(self.store, self.pid, every_run_scripted)
        self.store.export(self.pid, self.folder, as_source=True)
        export_steps(self.store, self.pid, self.folder)
        export_spend(self.store, self.pid, self.folder)

    def _spend(self, live: LiveStatus, force: bool = False) -> None:
        """spend.json again when the spend moved (at most every SPEND_EVERY_S)."""
        if live.setting is None:
            return
        total = live.setting.control.spent_usd
        if total == self.spend_usd or (not force and
                                       time.monotonic() - self.spend_at < SPEND_EVERY_S):
            return
        shares = {unit: from_nano(inputs.spent_nano) for unit, inputs in live.inputs.items()
                  if inputs.spent_nano}
        write_spend(self.folder, live.setting.control, shares)
        self.spend_at, self.spend_usd = time.monotonic(), total

    def _sweep(self, units: int) -> None:
        """The next slice of the agent-state files and memory notes, written if changed
        (a unit has some five: a tenth of the units' worth makes a cycle of some 50 looks)."""
        count = max(SWEEP_MIN, units // 10)
        self.cursors, state, memory = self.store.sweep_agent_state_and_memory(
            self.pid, self.cursors, count)
        self._write(AGENT_STATE_DIR, state)
        self._write(MEMORY_DIR, memory)

    def _write(self, base: str, files: dict[str, bytes]) -> None:
        """Write the files under base that differ from what this sync last wrote there."""
        changed = {f"{base}/{rel}": data for rel, data in files.items()
                   if self.written.get(f"{base}/{rel}") != data}
        if not changed:
            return
        with folder_synced(self.folder), Dir.open(self.folder.resolve()) as root:
            for name, data in changed.items():
                rel = str(safe_relpath(name))
                check_target(root, rel)
                write_atomic(root, rel, data)
                self.written[name] = data
