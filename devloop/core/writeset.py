"""What each role may write inside its unit, as path patterns. Pure."""

from __future__ import annotations

from fnmatch import fnmatchcase

ROLE_WRITE_SETS: dict[str, tuple[str, ...]] = {
    "coder": ("code/**", "contract.json", "coder.log"),
    "tester": ("tests/**", "runs/{run_id}/**"),
    "reassess": (),
}


def write_set(role: str, run_id: str | None = None) -> tuple[str, ...]:
    """The role's write patterns, relative to its unit dir, with the run id filled in."""
    if role not in ROLE_WRITE_SETS:
        raise ValueError(f"unknown role {role!r}; expected one of {sorted(ROLE_WRITE_SETS)}")
    patterns = ROLE_WRITE_SETS[role]
    if any("{run_id}" in p for p in patterns):
        if not run_id:
            raise ValueError(f"role {role!r} needs a run id")
        patterns = tuple(p.replace("{run_id}", run_id) for p in patterns)
    return patterns


def writable_roots(patterns: tuple[str, ...]) -> list[str]:
    """The directories and files to bind writable: `code/**` -> `code`."""
    return [p.removesuffix("/**") for p in patterns]


def allowed(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether a unit-relative posix path falls inside the write set."""
    if path.startswith("/") or ".." in path.split("/"):
        return False
    for pattern in patterns:
        if pattern.endswith("/**"):
            if path.startswith(pattern[:-2]):
                return True
        elif fnmatchcase(path, pattern):
            return True
    return False


# Files of a write set that only one tool writes: unit-relative pattern -> (the owning
# tool, what to do instead). The session may not change them by any other means.
ROLE_RECORDS: dict[str, dict[str, tuple[str, str]]] = {
    "coder": {"coder.log": ("append_coder_log", "add your decision with append_coder_log")},
    "tester": {
        "runs/{run_id}/result.json": ("run_tests", "improve a hint with set_hint"),
        "runs/{run_id}/stdout.txt": ("run_tests", "run_tests writes it"),
        "runs/{run_id}/stderr.txt": ("run_tests", "run_tests writes it"),
    },
}


def owned_files(role: str, run_id: str | None = None) -> dict[str, tuple[str, str]]:
    """The role's tool-owned files, unit-relative, with the run id filled in."""
    owned = ROLE_RECORDS.get(role, {})
    if any("{run_id}" in p for p in owned) and not run_id:
        return {}  # no run, no run files (write_set refuses such a tester anyway)
    return {p.replace("{run_id}", run_id or ""): v for p, v in owned.items()}
