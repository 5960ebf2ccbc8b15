"""One test run of a tester session: run, bridge to bugs, record result.json with bug ids."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

from devloop.core.config import load_settings
from devloop.core.models import RunResult
from devloop.roles.bugbridge import bridge_run
from devloop.roles.hollowrun import hollow_check
from devloop.roles.services import RoleServices
from devloop.runners.base import TIMEOUT_S, write_run_file


def run_and_record(role: RoleServices, view: Path, timeout_s: float = TIMEOUT_S) -> RunResult:
    """Run the unit's tests, bridge the result to the bug ledger, and remember it; a green
    run is run once more against a hollow build of code/ to see which tests can fail."""
    assert role.runner is not None and role.run_id is not None
    live = role.live_output(role.run_id) if role.live_output else nullcontext(None)
    with live as sink:
        outcome = role.runner.run(
            view=view,
            unit_id=role.unit_id,
            run_id=role.run_id,
            attempt=role.attempt,
            retry_budget_left=role.retry_budget_left,
            timeout_s=timeout_s,
            on_output=sink,
        )
    result = outcome.result
    proof = None
    if role.claims is not None:
        settings = role.settings or load_settings()
        proof = hollow_check(role.runner, settings, view, outcome, role.claims, timeout_s)
    if proof is not None:
        result = result.model_copy(update={"adequacy": proof})
    opened, moved = bridge_run(role.bugs, result)
    # The bridge filled in bug ids: write result.json again with them (never through a
    # symlink the tests may have planted).
    write_result(role, view, result)
    # The run files are the runner's: record them, so nothing else may change them.
    role.record(f"runs/{role.run_id}/stdout.txt", outcome.stdout.encode())
    role.record(f"runs/{role.run_id}/stderr.txt", outcome.stderr.encode())
    role.last_run = {
        "result": result.to_json_dict(),
        "bugs_opened": opened,
        "bugs_transitioned": [m.model_dump(by_alias=True) for m in moved],
    }
    return result


def write_result(role: RoleServices, view: Path, result: RunResult) -> None:
    """Write the run's result.json from the host and record it as the runner's."""
    text = json.dumps(result.to_json_dict(), indent=2, ensure_ascii=False)
    write_run_file(view, f"units/{role.unit_id}/runs/{role.run_id}/result.json", text)
    role.record(f"runs/{role.run_id}/result.json", text.encode())
