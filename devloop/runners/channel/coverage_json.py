"""pytest plugin: coverage.py's json report, written by the test run's own process at its end.

`coverage json` as a second python after the run cost a start-up and coverage's import per
run (0.05 CPU-s, about a third of a small run). The report is detail the tests could forge
either way (devloop/runners/coverage.py): its path is read at start-up, any failure of its
own is silent and leaves the report absent, and nothing it prints reaches the run's output.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any

OUT_ENV = "DEVLOOP_COVERAGE_JSON"
_OUT = os.environ.get(OUT_ENV, "")


def pytest_unconfigure(config: Any) -> None:
    if not _OUT:
        return
    with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        import coverage

        measuring = coverage.Coverage.current()
        if measuring is not None:
            measuring.stop()
            measuring.json_report(outfile=_OUT, ignore_errors=True)
