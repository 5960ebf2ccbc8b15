"""The sandbox wall, tested with real bubblewrap: each test checks what did not happen."""

from __future__ import annotations

import errno
import logging
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.core.errors import SandboxUnavailable
from devloop.sandbox import (
    REFUSED_EXIT,
    BareSandbox,
    BwrapSandbox,
    Limits,
    Observation,
    Sandbox,
    make_sandbox,
    new_view_dir,
)
from devloop.sandbox.bwrap import probe
from devloop.server.redis_server import RedisServer

SECRET_CODE = "const SECRET = 'unit-b-private-code';\n"
WRITABLE = ["units/a/code", "units/a/contract.json", "units/a/coder.log"]
PY = "/usr/bin/python3"  # Debian's python: world-readable, unlike pyenv's under /root
# Added to every wall-clock bound derived from a configured limit: a loaded CI machine may
# pause the host side for many seconds, and a bound it misses proves nothing.
SLACK_S = 30


@pytest.fixture(scope="module")
def settings() -> Iterator[Settings]:
    """Settings with a private, world-readable cache dir (never under /root or tmp_path)."""
    cache = Path(tempfile.mkdtemp(prefix="devloop-test-", dir="/var/tmp"))
    cache.chmod(0o755)
    yield Settings(cache_dir=cache, output_cap_bytes=64 * 1024, command_timeout_s=30)
    shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="module")
def sandbox(settings: Settings) -> BwrapSandbox:
    """A bubblewrap sandbox with default limits."""
    return BwrapSandbox(settings)


@pytest.fixture
def scratch(settings: Settings) -> Iterator[Callable[[str], Path]]:
    """Fresh dirs the sandbox uid can reach (views, toolchains), removed after the test."""
    made: list[Path] = []

    def make(prefix: str) -> Path:
        made.append(new_view_dir(settings, prefix=prefix))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def project(scratch: Callable[[str], Path]) -> Path:
    """The host project: unit b's code is on this host, world-readable, outside the view."""
    root = scratch("project-")
    (root / "units/b/code").mkdir(parents=True)
    (root / "units/b/code/secret.js").write_text(SECRET_CODE)
    return root


@pytest.fixture
def view(scratch: Callable[[str], Path]) -> Path:
    """Unit a's coder view: units.json, its own code, and only b's contract."""
    root = scratch("view-")
    (root / "units.json").write_text('{"units": []}\n')
    (root / "units/a/code").mkdir(parents=True)
    (root / "units/a/code/x.js").write_text("export const x = 1;\n")
    (root / "units/b").mkdir(parents=True)
    (root / "units/b/contract.json").write_text('{"unit_id": "b"}\n')
    return root


def run(sandbox: Sandbox, view: Path, command: str, timeout_s: float | None = None) -> Observation:
    """Run in unit a's cwd with the coder's write set."""
    return sandbox.run(command, view=view, cwd="units/a", writable=WRITABLE, timeout_s=timeout_s)


def uid_processes(uid: int, token: str) -> int:
    """How many processes on the host run with real uid `uid` and `token` in their command
    line (other tests' sandboxes, run by parallel workers as the same uid, do not count)."""
    count = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            lines = (proc / "status").read_text().splitlines()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        uids = next((ln.split()[1:] for ln in lines if ln.startswith("Uid:")), [])
        count += bool(uids) and int(uids[0]) == uid and token.encode() in cmdline
    return count


def sleeping_as(name: str) -> str:
    """A shell command that sleeps for good under argv[0] `name` (cheap to start, unlike a
    python sleeper, so it is running in milliseconds even on a loaded machine)."""
    return f"bash -c 'exec -a {name} sleep 1000'"


def host_pids(pattern: str) -> list[str]:
    """Host pids whose command line matches `pattern` (a regex)."""
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return found.stdout.split()


# --- the filesystem wall ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "host_path"),
    [
        ("echo pwned > /project/units.json", "units.json"),
        ("echo pwned > ../../units.json", "units.json"),
        ("echo pwned > ../b/contract.json", "units/b/contract.json"),
        ("echo pwned > ../b/evil.js", "units/b/evil.js"),
        ("mkdir ../c", "units/c"),
        ("echo pwned > spec.json", "units/a/spec.json"),
        ("echo pwned > /proc/self/root/project/units.json", "units.json"),
        ("ln -s /project/units.json code/link && echo pwned > code/link", "units.json"),
    ],
)
def test_writes_outside_the_write_set_fail_and_leave_the_host_untouched(
    sandbox: BwrapSandbox, view: Path, command: str, host_path: str
) -> None:
    before = (view / host_path).read_bytes() if (view / host_path).exists() else None
    obs = run(sandbox, view, command)
    assert obs.exit_code != 0
    assert "Read-only file system" in obs.stderr
    after = (view / host_path).read_bytes() if (view / host_path).exists() else None
    assert after == before
    assert b"pwned" not in (after or b"")


@pytest.mark.parametrize("path", ["/usr/pwned", "/etc/pwned", "/pwned", "/bin/pwned"])
def test_the_system_is_read_only(sandbox: BwrapSandbox, view: Path, path: str) -> None:
    obs = run(sandbox, view, f"echo pwned > {path}")
    assert obs.exit_code != 0
    assert not Path(path).exists()


def test_writes_to_the_write_set_land_on_the_host(sandbox: BwrapSandbox, view: Path) -> None:
    obs = run(
        sandbox,
        view,
        "echo 'export const y = 2;' > code/y.js && mkdir -p code/lib && echo z > code/lib/z.js"
        " && echo '{\"unit_id\": \"a\"}' > contract.json && printf -- '---\\nk: v\\n---\\n'"
        " >> coder.log && echo ok > /tmp/scratch && cat /tmp/scratch",
    )
    assert obs.exit_code == 0, obs.stderr
    assert obs.stdout == "ok\n"
    assert (view / "units/a/code/y.js").read_text() == "export const y = 2;\n"
    assert (view / "units/a/code/lib/z.js").read_text() == "z\n"
    assert (view / "units/a/contract.json").read_text() == '{"unit_id": "a"}\n'
    assert (view / "units/a/coder.log").read_text() == "---\nk: v\n---\n"
    assert not Path("/tmp/scratch").exists()  # the sandbox's /tmp is private


def test_missing_writable_paths_are_created_files_empty(sandbox: BwrapSandbox, view: Path) -> None:
    obs = sandbox.run(
        "true",
        view=view,
        cwd="units/a",
        writable=["units/a/tests", "units/a/runs/run-1", "units/a/x.log"],
    )
    assert obs.exit_code == 0
    assert (view / "units/a/tests").is_dir()
    assert (view / "units/a/runs/run-1").is_dir()
    assert (view / "units/a/x.log").read_bytes() == b""


def test_other_units_code_and_host_paths_are_not_mounted(
    sandbox: BwrapSandbox, view: Path, project: Path
) -> None:
    secret = project / "units/b/code/secret.js"
    obs = run(
        sandbox,
        view,
        f"cat {secret}; cat /proc/self/root{secret}; ls /work /root /home /var/tmp/devloop"
        " /var/cache/devloop; find /project -name '*.js'; cat /work/main/pyproject.toml",
    )
    assert "unit-b-private-code" not in obs.stdout + obs.stderr
    assert obs.stdout.split() == ["/project/units/a/code/x.js"]
    # Absent, not merely unreadable: "Permission denied" would mean the path is there.
    assert "Permission denied" not in obs.stderr
    hidden = (secret, "/work", "/root", "/home", "/var/tmp/devloop", "/var/cache/devloop",
              "/work/main/pyproject.toml")
    for path in hidden:
        lines = [ln for ln in obs.stderr.splitlines() if f"{path}'" in ln or f"{path}:" in ln]
        assert lines and all("No such file or directory" in ln for ln in lines), (path, lines)


def test_a_planted_symlink_cannot_redirect_a_later_bind(sandbox: BwrapSandbox, view: Path) -> None:
    (view / "units/a/code/out").symlink_to(view / "units")
    with pytest.raises(ValueError, match="symlink"):
        sandbox.run("true", view=view, cwd="units/a", writable=["units/a/code/out/b"])
    with pytest.raises(ValueError, match="inside the view"):
        sandbox.run("true", view=view, cwd="units/a", writable=["units/a/../b"])


def test_a_toolchain_is_bound_read_only_with_private_tmpfs_dirs(
    sandbox: BwrapSandbox, scratch: Callable[[str], Path], view: Path
) -> None:
    toolchain = scratch("toolchain-")
    (toolchain / "lib").mkdir()
    (toolchain / "lib/index.js").write_text("module.exports = 42;\n")
    (toolchain / ".vite-temp").mkdir()
    obs = sandbox.run(
        "cat /project/node_modules/lib/index.js; echo pwned > /project/node_modules/lib/x.js;"
        " echo tmp > /project/node_modules/.vite-temp/t && cat /project/node_modules/.vite-temp/t",
        view=view,
        cwd="units/a",
        writable=WRITABLE,
        ro_binds=[(toolchain, "node_modules")],
        tmpfs=["node_modules/.vite-temp"],
    )
    assert obs.stdout == "module.exports = 42;\ntmp\n"
    assert "Read-only file system" in obs.stderr
    assert sorted(p.name for p in toolchain.rglob("*")) == [".vite-temp", "index.js", "lib"]
    assert (view / "node_modules").is_dir()  # the mount point was created in the view
    with pytest.raises(ValueError, match="pre-create it in the toolchain"):
        sandbox.run(
            "true",
            view=view,
            cwd="units/a",
            writable=[],
            ro_binds=[(toolchain, "node_modules")],
            tmpfs=["node_modules/.vite"],
        )


# --- secrets ---------------------------------------------------------------------------


def test_secrets_in_the_parent_env_reach_no_command(
    settings: Settings, view: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-secret")
    monkeypatch.setenv("DEVLOOP_REDIS_URL", "redis+socket:///run/devloop-secret.sock")
    sandbox = BwrapSandbox(settings)
    obs = run(
        sandbox,
        view,
        "env; cat /proc/1/environ /proc/self/environ /proc/$$/environ;"
        " cat /proc/*/environ; cat /proc/self/root/proc/1/environ;"
        f" cat /proc/{os.getpid()}/environ; ls /proc",
    )
    seen = obs.stdout + obs.stderr
    assert "HOME=/tmp" in seen  # the commands ran and printed an environment
    assert "sk-test-secret" not in seen
    assert "devloop-secret" not in seen
    assert "ANTHROPIC" not in seen and "DEVLOOP" not in seen
    assert f"/proc/{os.getpid()}/environ: No such file" in obs.stderr  # host pids are invisible


def test_extra_env_names_that_look_like_secrets_are_refused(settings: Settings, view: Path) -> None:
    for name in ("ANTHROPIC_API_KEY", "GITHUB_TOKEN", "DATABASE_URL", "REDIS_HOST", "X_SECRET"):
        with pytest.raises(ValueError, match=name):
            BwrapSandbox(settings, env={name: "x"})
    sandbox = BwrapSandbox(settings, env={"NODE_OPTIONS": "--no-warnings"})
    assert run(sandbox, view, "echo $NODE_OPTIONS").stdout == "--no-warnings\n"


# --- the network wall ------------------------------------------------------------------

CONNECT = (
    PY + " -c 'import socket,sys; s=socket.socket(); s.settimeout(3)\n"
    'try: s.connect((sys.argv[1], int(sys.argv[2]))); print("CONNECTED")\n'
    'except OSError as e: print("FAILED", e)\' {host} {port}'
)


def test_the_hosts_loopback_is_unreachable(sandbox: BwrapSandbox, view: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert socket.create_connection(("127.0.0.1", port), timeout=1)  # it does listen
        server.accept()[0].close()
        obs = run(sandbox, view, CONNECT.format(host="127.0.0.1", port=port))
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()  # nothing from the sandbox ever arrived
    assert obs.stdout.startswith("FAILED"), obs.stdout + obs.stderr
    assert "Connection refused" in obs.stdout  # the namespace's own, empty loopback


def test_a_real_redis_on_the_hosts_loopback_is_unreachable(
    sandbox: BwrapSandbox, view: Path, tmp_path: Path
) -> None:
    with RedisServer(tmp_path / "tcp-redis", unix_socket=False) as server:
        server.client().set("secret", "from the host")
        ping = 'printf "PING\\r\\n" | python3 -c "import socket,sys; s=socket.create_connection(' \
            f"('127.0.0.1', {server.port}), 1); s.sendall(sys.stdin.buffer.read()); " \
            'print(s.recv(64))" 2>&1; true'
        obs = run(sandbox, view, ping)
        assert "PONG" not in obs.stdout and "Connection refused" in obs.stdout
        assert server.client().get("secret") == b"from the host"  # and it is really there


def test_outside_addresses_are_unreachable_at_once(sandbox: BwrapSandbox, view: Path) -> None:
    obs = run(sandbox, view, CONNECT.format(host="10.255.255.1", port=80))
    # Refused by the kernel at once (no route), not after the script's 3 s connect timeout,
    # which would say "timed out"; no wall-clock bound: a loaded machine may be slow to start.
    assert obs.stdout.startswith("FAILED") and "Network is unreachable" in obs.stdout


def test_the_sandbox_has_a_private_loopback(sandbox: BwrapSandbox, view: Path) -> None:
    script = (
        "import socket; s=socket.create_server(('127.0.0.1', 0)); "
        "c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.sendall(b'hi'); "
        "print(a.recv(2).decode(), socket.gethostbyname('localhost'))"
    )
    obs = run(sandbox, view, f'{PY} -c "{script}"')
    assert obs.stdout == "hi 127.0.0.1\n", obs.stderr


# --- resource limits -------------------------------------------------------------------


def test_the_default_limits_are_the_documented_ones(sandbox: BwrapSandbox, view: Path) -> None:
    script = (
        "import resource as r; print(*[r.getrlimit(getattr(r, 'RLIMIT_' + n))[0] "
        "for n in ('NPROC', 'DATA', 'FSIZE', 'CPU')])"
    )
    obs = run(sandbox, view, f'{PY} -c "{script}"')
    nproc, data, fsize, cpu = (int(v) for v in obs.stdout.split())
    # 256 for a root worker and a non-root one alike: set inside the sandbox's own user
    # namespace, where only the command's processes count (tests/test_sandbox_limits.py).
    assert (nproc, data, fsize, cpu) == (256, 4 * 1024**3, 64 * 1024**2, 600)


def test_writable_memory_past_the_limit_cannot_be_had(settings: Settings, view: Path) -> None:
    small = BwrapSandbox(settings, Limits(data_bytes=256 * 1024**2))
    obs = run(small, view, f"{PY} -c 'bytearray(512 * 1024**2); print(\"got it\")'")
    assert obs.exit_code != 0 and "MemoryError" in obs.stderr and "got it" not in obs.stdout
    fits = run(small, view, f"{PY} -c 'bytearray(64 * 1024**2); print(\"got it\")'")
    assert fits.stdout == "got it\n"


def test_an_endless_loop_is_stopped_at_its_cpu_time_limit(settings: Settings, view: Path) -> None:
    brief = BwrapSandbox(settings, Limits(cpu_s=1))
    obs = run(brief, view, "while :; do :; done", timeout_s=1 + SLACK_S)
    # SIGXCPU at the soft limit (152), SIGKILL at the hard one (137): never the wall clock.
    assert not obs.timed_out and obs.exit_code in (128 + 24, 128 + 9), obs


# Every process forks for 2 s, then exits; a failed fork waits and tries again, so the bomb
# holds the limit the whole time, each of its processes with the token in its command line (a
# shell's bomb collapses as its forks fail and left the count nothing to see on a loaded
# machine). The first process says why its fork failed.
FORK_BOMB = """import errno, os, sys, time
first, end, refused = os.getpid(), time.monotonic() + 2, None
while time.monotonic() < end:
    try:
        os.fork()
    except OSError as error:
        refused = error.errno
        time.sleep(0.05)
if os.getpid() == first and refused is not None:
    print("fork refused:", os.strerror(refused), file=sys.stderr)
"""


def test_a_fork_bomb_is_contained(settings: Settings, view: Path) -> None:
    sandbox = BwrapSandbox(settings, Limits(processes=64))
    token = f"devloop-test-{uuid.uuid4().hex}"  # in the command line of every fork of the bomb
    started = time.monotonic()
    done: list[Observation] = []
    bomb = threading.Thread(target=lambda: done.append(run(
        sandbox, view, f"exec {PY} -c {shlex.quote(FORK_BOMB)} {token}", timeout_s=8)))
    bomb.start()
    seen = 0  # the count below does see the bomb's processes while it runs
    while bomb.is_alive():
        seen = max(seen, uid_processes(sandbox.uid, token))
        time.sleep(0.05)
    [obs] = done
    assert 1 < seen <= 64 + 2 and time.monotonic() - started < 8 + SLACK_S
    assert f"fork refused: {os.strerror(errno.EAGAIN)}" in obs.stderr, obs  # the limit was hit
    deadline = time.monotonic() + SLACK_S
    while uid_processes(sandbox.uid, token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uid_processes(sandbox.uid, token) == 0


def test_files_past_the_size_limit_cannot_be_written(settings: Settings, view: Path) -> None:
    sandbox = BwrapSandbox(settings, Limits(file_bytes=1024 * 1024))
    obs = run(sandbox, view, "head -c 2000000 /dev/zero > code/big.bin")
    assert obs.exit_code != 0
    assert (view / "units/a/code/big.bin").stat().st_size <= 1024 * 1024


def test_the_sandbox_runs_as_the_unprivileged_uid(sandbox: BwrapSandbox, view: Path) -> None:
    obs = run(sandbox, view, "id -u; cat /proc/self/status | grep -i '^cap'")
    expected = 65534 if os.geteuid() == 0 else os.getuid()
    assert obs.stdout.splitlines()[0] == str(expected)
    assert "CapEff:\t0000000000000000" in obs.stdout


def test_sandboxed_commands_run_at_the_configured_lower_priority(
    settings: Settings, view: Path
) -> None:
    gentle = BwrapSandbox(settings.model_copy(update={"sandbox_nice": 7}))
    # The session's weight is set just after the sandbox starts: its command waits (5 s at
    # most) to see it, as every command longer than an instant does.
    obs = run(gentle, view, "nice; for i in $(seq 50); do grep -q ' nice 7$' /proc/self/autogroup"
                            " && break; sleep 0.1; done; cat /proc/self/autogroup")
    lines = obs.stdout.splitlines()
    assert lines[0] == "7", obs.stderr
    autogroups = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if os.geteuid() == 0 and autogroups.exists() and autogroups.read_text().strip() == "1":
        # The whole session weighs as nice 7, not only the processes in it.
        assert lines[1].endswith(" nice 7"), lines
    assert run(BwrapSandbox(settings), view, "nice").stdout == "5\n"  # the default


def test_the_sandbox_has_no_controlling_terminal(sandbox: BwrapSandbox, view: Path) -> None:
    # Without one there is no terminal to push input into (TIOCSTI): what bwrap's
    # --new-session guards against, here by the setsid() the sandbox is started with.
    obs = run(sandbox, view, "exec 3</dev/tty && echo has-a-tty")
    assert obs.exit_code != 0 and "has-a-tty" not in obs.stdout


# --- time and output -------------------------------------------------------------------


def test_timeout_kills_the_command_and_its_background_children(
    sandbox: BwrapSandbox, view: Path
) -> None:
    token = f"devloop-test-{uuid.uuid4().hex}"
    sleeper = sleeping_as(token)
    result: list[Observation] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run(sandbox, view, f"{sleeper} & echo started; {sleeper}", timeout_s=5)
        ),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 5
    while len(host_pids(f"^{token}")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(host_pids(f"^{token}")) == 2  # both were running
    thread.join(5 + SLACK_S)
    obs = result[0]
    assert obs.timed_out and obs.exit_code == 137
    assert obs.stdout == "started\n"
    assert 5000 <= obs.duration_ms < (5 + SLACK_S) * 1000
    assert host_pids(token) == []


def test_background_children_die_when_the_command_returns(
    sandbox: BwrapSandbox, view: Path
) -> None:
    token = f"devloop-test-{uuid.uuid4().hex}"
    obs = run(sandbox, view, f"{sleeping_as(token)} & echo done", timeout_s=120)
    assert not obs.timed_out and obs.stdout == "done\n"
    assert host_pids(token) == []


def test_an_output_flood_is_capped_with_a_marker(sandbox: BwrapSandbox, view: Path) -> None:
    obs = run(sandbox, view, "yes | head -c 10000000; yes | head -c 200000 >&2")
    assert obs.truncated and obs.exit_code == 0
    cap = 64 * 1024
    assert obs.stdout.startswith("y\ny\n")
    assert obs.stdout.endswith(f"\n[... {10_000_000 - cap} bytes truncated ...]\n")
    assert len(obs.stdout) < cap + 100
    assert obs.stderr.endswith(f"\n[... {200_000 - cap} bytes truncated ...]\n")


def test_jsonguard_refusals_start_no_process(sandbox: BwrapSandbox, view: Path) -> None:
    obs = run(
        sandbox, view, 'touch code/ran; curl -d \'{"title": "x"}\' http://127.0.0.1:3000/todos'
    )
    assert obs.refused is not None and "-d @/tmp/body.json" in obs.refused
    assert obs.exit_code == REFUSED_EXIT and obs.stderr == obs.refused
    assert not (view / "units/a/code/ran").exists()


def test_a_failed_probe_says_why_and_how_to_fix_it(sandbox: BwrapSandbox) -> None:
    broken = ("--unshare-all", "--ro-bind", "/nonexistent-devloop-dir", "/x")
    with pytest.raises(SandboxUnavailable) as caught:
        probe(sandbox.bwrap, broken, None, os.getgid())
    assert "Can't find source path" in str(caught.value)  # bubblewrap's own words
    assert "seccomp=deploy/seccomp-bwrap.json" in str(caught.value)


def test_a_view_the_sandbox_uid_cannot_enter_is_refused(
    sandbox: BwrapSandbox, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root drops to another uid")
    with pytest.raises(ValueError, match="new_view_dir"):
        sandbox.run("true", view=tmp_path, cwd=".", writable=[])


# --- the unsandboxed fallback ----------------------------------------------------------


def test_bare_sandbox_warns_and_keeps_env_timeout_and_caps(
    settings: Settings,
    view: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-secret")
    bare = BareSandbox(settings)
    token = f"devloop-test-{uuid.uuid4().hex}"
    with caplog.at_level(logging.WARNING):
        env = run(bare, view, "env; pwd; yes | head -c 100000")
        slow = run(
            bare,
            view,
            f"{PY} -c 'import time; time.sleep(1000)' {token} & sleep 1000",
            timeout_s=0.5,
        )
    assert "sk-test-secret" not in env.stdout and env.truncated
    assert f"\n{view}/units/a\n" in env.stdout
    assert slow.timed_out and host_pids(token) == []
    assert sum("WITHOUT a sandbox" in r.message for r in caplog.records) == 2
    assert run(bare, view, "curl --json '[1]' x").refused is not None


def test_bare_sandbox_runs_a_sessions_commands_one_after_another(
    settings: Settings,
    view: Path,
    scratch: Callable[[str], Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    toolchain = scratch("toolchain-")
    (toolchain / "lib").mkdir()
    (toolchain / "lib/index.js").write_text("module.exports = 42;\n")
    bare = BareSandbox(settings)
    with caplog.at_level(logging.WARNING):
        runs = [
            bare.run(
                f"cat ../../node_modules/lib/index.js && echo {n} > code/n.js",
                view=view,
                cwd="units/a",
                writable=WRITABLE,
                ro_binds=[(toolchain, "node_modules")],
                tmpfs=["node_modules/.vite-temp"],
            )
            for n in (1, 2)
        ]
    assert [(o.exit_code, o.stdout) for o in runs] == [(0, "module.exports = 42;\n")] * 2
    assert (view / "units/a/code/n.js").read_text() == "2\n"
    assert sum("WITHOUT a sandbox" in r.message for r in caplog.records) == 2
    # A link the command itself pointed elsewhere is refused, not followed.
    (view / "node_modules").unlink()
    (view / "node_modules").symlink_to("/etc")
    with pytest.raises(ValueError, match="is a symlink"):
        bare.run(
            "true", view=view, cwd="units/a", writable=[], ro_binds=[(toolchain, "node_modules")]
        )


def test_make_sandbox_follows_the_setting(settings: Settings) -> None:
    assert isinstance(make_sandbox(settings), BwrapSandbox)
    assert isinstance(make_sandbox(settings.model_copy(update={"sandbox": "none"})), BareSandbox)
