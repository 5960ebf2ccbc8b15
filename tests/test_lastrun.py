"""A folder's last run: options not given carry on as it ran, options given win."""

from __future__ import annotations

import os
from pathlib import Path

from devloop.project.lastrun import Given, RunChoices, carry_on, recall, remember


def test_options_not_given_are_the_last_runs_and_are_said_when_they_are_not_defaults(
    tmp_path: Path,
) -> None:
    last = RunChoices(llm="stub", workers=2, console=True, console_port=9000)
    choices, carried = carry_on(Given(), last, tmp_path)
    assert choices == last
    assert carried == ["--llm stub", "--console", "--console-port 9000"]  # --workers 2: default


def test_options_given_win_and_a_script_goes_with_the_stub(tmp_path: Path) -> None:
    last = RunChoices(llm="stub", script="/elsewhere/turns.yaml", workers=4)
    choices, carried = carry_on(Given(llm="anthropic", console=False), last, tmp_path)
    assert (choices.llm, choices.script, choices.workers, choices.console) == (
        "anthropic", None, 4, False)
    assert carried == ["--workers 4"]


def test_a_new_folder_runs_with_the_defaults(tmp_path: Path) -> None:
    assert carry_on(Given(), None, tmp_path) == (RunChoices(), [])


def test_the_folders_own_script_is_kept_relative_to_it_and_another_absolute(
    tmp_path: Path,
) -> None:
    os.chdir(tmp_path)
    (tmp_path / "p").mkdir()
    own, _ = carry_on(Given(llm="stub", script=Path("p/stub.yaml")), None, tmp_path / "p")
    other, _ = carry_on(Given(llm="stub", script=Path("turns.yaml")), None, tmp_path / "p")
    assert own.script is None and other.script == str(tmp_path / "turns.yaml")


def test_the_choices_are_kept_privately_in_the_folder_and_read_back(tmp_path: Path) -> None:
    assert recall(tmp_path) is None and not (tmp_path / ".devloop").exists()
    remember(tmp_path, RunChoices(llm="stub", workers=3))
    kept = tmp_path / ".devloop" / "last-run.json"
    assert kept.stat().st_mode & 0o077 == 0
    assert recall(tmp_path) == RunChoices(llm="stub", workers=3)
    kept.write_text('{"llm": "gpt", "workers": 3}')  # damaged or from another version
    assert recall(tmp_path) is None
