"""`BareSandbox`: the same contract without isolation, for DEVLOOP_SANDBOX=none only."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from devloop.core.config import Settings
from devloop.safe.safedir import Dir
from devloop.sandbox.base import (
    Limits,
    Observation,
    default_limits,
    in_view,
    prepare_writable,
    refusal,
    sandbox_env,
    sandbox_path,
    view_relative,
)
from devloop.sandbox.jsonguard import check_command
from devloop.sandbox.process import OutputSink, limit_setter, run_process
from devloop.sandbox.weight import sandbox_group

log = logging.getLogger(__name__)


class BareSandbox:
    """Runs commands on the host in `view/cwd`: env allowlist, rlimits, timeout, caps.

    Nothing stops a command from reading or writing anywhere the worker can, or from
    reaching the network. `ro_binds` under the view become symlinks; `tmpfs` is ignored.
    """

    def __init__(
        self,
        settings: Settings,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits or default_limits(settings)
        self.env = sandbox_env(env)

    def run(
        self,
        command: str,
        *,
        view: Path,
        cwd: str,
        writable: Sequence[str],
        timeout_s: float | None = None,
        ro_binds: Sequence[tuple[Path, str]] = (),
        tmpfs: Sequence[str] = (),
        pass_fds: Sequence[int] = (),
        on_output: OutputSink | None = None,
    ) -> Observation:
        """Run `command` with `/bin/sh -c` in `view/cwd`, unsandboxed; see `Sandbox.run`."""
        refused = check_command(command)
        if refused is not None:
            return refusal(refused)
        log.warning(
            "command ran WITHOUT a sandbox (DEVLOOP_SANDBOX=none): %r in %s/%s",
            command[:200],
            view,
            cwd,
        )
        with Dir.open(view) as root:
            prepare_writable(root, writable, owner=None)
            for source, dest in ro_binds:
                rel = view_relative(sandbox_path(dest))
                if rel is not None:
                    _link_toolchain(root, rel, source)
            workdir = view
            if PurePosixPath(cwd).parts:
                workdir = view / in_view(root, cwd, "cwd")
                root.mkdirs(cwd)
        return run_process(
            ["/bin/sh", "-c", command],
            env=self.env,
            cwd=str(workdir),
            timeout_s=timeout_s if timeout_s is not None else self.settings.command_timeout_s,
            output_cap=self.settings.output_cap_bytes,
            # No RLIMIT_NPROC: with no user namespace it would count the worker's processes.
            preexec=limit_setter(self.limits),
            nice=self.limits.nice,
            pass_fds=pass_fds,
            on_output=on_output,
            cpu_group=sandbox_group(self.settings.sandbox_cpu_shares),
            caps=self.limits,
        )


def _link_toolchain(root: Dir, rel: str, source: Path) -> None:
    """Stand in for a read-only bind: a symlink where the mount point would be.

    The link is this sandbox's own, made by an earlier command of the session: it is
    left as it is when it still names `source` (host code never follows it).
    """
    st = root.lstat(rel)
    if st is not None and stat.S_ISLNK(st.st_mode) and root.readlink(rel) == str(source):
        return
    rel = in_view(root, rel, "ro_binds")
    if st is not None and stat.S_ISDIR(st.st_mode):
        with root.opendir(rel) as mount, os.scandir(mount.fd) as entries:
            empty = next(entries, None) is None
        if empty:
            root.remove(rel)
    if not root.exists(rel):
        root.symlink(str(source), rel)
