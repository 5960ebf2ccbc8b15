"""docs/user-guide.md says what the code does: its generated tables are what the code
renders now, the measured figures it quotes are the ones its cost table is made of, the test
runners' flags it names are theirs, the default cap's message it shows is the one a run
prints, and every test it names exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devloop.cli.run.people import default_cap_words
from devloop.fleet.status import ProjectStatus
from devloop.report.guide import (
    BY_HAND,
    MEASURED,
    guide_path,
    packages_table,
    predicted_tokens,
    refresh,
)
from tests.test_readme import REPO, missing, named_tests

GUIDE = guide_path().read_text()
WORDS = " ".join(GUIDE.split())  # prose, however its lines are wrapped


def test_the_guides_generated_tables_are_what_the_code_renders_now() -> None:
    assert refresh(GUIDE) == GUIDE


def test_a_stale_table_or_a_lost_marker_is_caught() -> None:
    stale = GUIDE.replace("| python | `pytest` | 8.4.2 |", "| python | `pytest` | 8.4.1 |")
    assert stale != GUIDE and refresh(stale) == GUIDE
    with pytest.raises(ValueError, match="0 blocks `<!-- generated: costs"):
        refresh(GUIDE.replace("<!-- generated: costs", "<!-- costs"))


def test_every_package_a_unit_may_use_is_in_the_table_with_what_it_is_for() -> None:
    table = packages_table()
    node = json.loads((REPO / "toolchains/node/package.json").read_text())["dependencies"]
    python = [line.split("==") for line in
              (REPO / "toolchains/python/requirements.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    for name, version in [*node.items(), *python]:
        row = next((r for r in table.splitlines() if f"| `{name}` | {version} |" in r), None)
        assert row is not None and not row.endswith("|  |"), name  # pinned, and what for


def test_the_measured_figures_the_prose_quotes_are_the_cost_tables() -> None:
    m = MEASURED
    for said in (f"{m.coder_first:,} tokens (coder) or {m.tester_first:,} (tester)",
                 f"each turn adds {m.growth}", f"write {m.output} tokens each",
                 f"took {m.scripted_requests} requests on average"):
        assert said in WORDS, said
    hand = predicted_tokens(BY_HAND["python"]) * 2  # the 2-unit project played by hand
    assert f"the formula predicts {round(hand / 1000)}k tokens for it, " \
           f"{round((1 - hand / 204_000) * 100)}% low" in WORDS


@pytest.mark.parametrize(("said", "source"), [
    ("-p no:cacheprovider", "devloop/runners/pytest.py"),
    ("--rootdir=.", "devloop/runners/pytest.py"),
    ("-o pythonpath=code", "devloop/runners/pytest.py"),
    ("--capture=tee-sys", "devloop/runners/pytest.py"),
    ("PYTHONHASHSEED=0", "devloop/runners/pytest.py"),
    ("--rcfile=/dev/null --branch --source=code", "devloop/runners/coverage.py"),
    ("node_modules/vitest/vitest.mjs run", "devloop/runners/vitest.py"),
    ("--reporter=default --reporter=json", "devloop/runners/vitest.py"),
    ("tests/**/*.{spec,test}.{js,mjs,cjs,ts,mts,cts,jsx,tsx}", "devloop/runners/vitest.py"),
    ("globals: true", "devloop/runners/vitest.py"),
    ("pool: 'forks'", "devloop/runners/vitest.py"),
    ("maxWorkers: 2", "devloop/runners/vitest.py"),
    ("// @vitest-environment jsdom", "devloop/runners/vitest.py"),
    ('"type": "commonjs"', "devloop/upstream/layout.py"),
])
def test_how_the_guide_says_tests_run_is_how_the_runners_run_them(said: str, source: str) -> None:
    assert said in WORDS
    assert said in (REPO / source).read_text()


def test_the_default_caps_message_the_guide_shows_is_the_one_a_run_prints() -> None:
    paused = ProjectStatus(pid="p-shop", units=[], paused="budget", spent_usd=25.0412,
                           real_spent_usd=25.0412, default_max_usd=25.0)
    assert default_cap_words(paused, Path("shop")) in GUIDE


def test_every_test_the_guide_names_exists() -> None:
    refs = named_tests(GUIDE)
    assert len(refs) >= 4
    assert missing(refs) == []
