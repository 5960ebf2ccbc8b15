"""docker-compose.yml, Procfile, Dockerfile: private by default (no Docker engine runs here).

The compose file cannot be brought up on this machine, so it is parsed and held to the
rules, and its Redis command is run as the container would run it, on a local port.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devloop.core.config import Settings
from devloop.core.errors import SandboxUnavailable
from devloop.sandbox import BwrapSandbox, new_view_dir
from devloop.sandbox.syscalls import filter_bpf
from devloop.server.redis_server import redis_executable
from tests.as_user import run_as, worker_cache, worker_uid
from tests.conftest import REPO
from tests.docker_seccomp import stock
from tests.proctree import wait_for_port
from tests.redis_fixture import assert_password_required

COMPOSE: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
PROCFILE = dict(
    line.split(": ", 1) for line in (REPO / "Procfile").read_text().splitlines()
    if line and not line.startswith("#")
)
DOCKERFILE = (REPO / "Dockerfile").read_text()
# The README and the pages of docs/, which show deployment commands too.
DOC_PAGES = ("README.md", *sorted(f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")))


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:?message}` and `$$`, enough for these files."""
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise KeyError(f"{name} is required: {match.group(0)}")
        return env[name]
    return re.sub(r"\$\{(\w+)(?::\?[^}]*)?\}", one, text.replace("$$", "\0")).replace("\0", "$")


def test_no_deployment_file_opens_flowers_api_without_auth() -> None:
    for name in ("docker-compose.yml", "Procfile", "Dockerfile", *DOC_PAGES):
        text = (REPO / name).read_text()
        assert "FLOWER_UNAUTHENTICATED_API=true" not in text, name
        assert 'FLOWER_UNAUTHENTICATED_API: "true"' not in text, name
    for service in SERVICES.values():
        assert "FLOWER_UNAUTHENTICATED_API" not in service.get("environment", {})


def test_compose_flower_requires_credentials_and_is_published_on_loopback_only() -> None:
    flower = SERVICES["flower"]
    assert flower["command"][:2] == ["devloop", "flower"]  # refuses to start without auth
    assert flower["environment"]["DEVLOOP_FLOWER_AUTH"].startswith("${DEVLOOP_FLOWER_AUTH:?")
    with pytest.raises(KeyError, match="DEVLOOP_FLOWER_AUTH is required"):
        interpolate(flower["environment"]["DEVLOOP_FLOWER_AUTH"], {})
    assert flower["ports"] == ["127.0.0.1:5555:5555"]
    published = [(name, p) for name, s in SERVICES.items() for p in s.get("ports", [])]
    assert published == [("flower", "127.0.0.1:5555:5555")]  # Redis is not published at all


def test_procfile_flower_binds_loopback_and_requires_credentials() -> None:
    assert PROCFILE["flower"].startswith("devloop flower")
    assert "0.0.0.0" not in PROCFILE["flower"] and "--basic-auth" not in PROCFILE["flower"]


def test_every_compose_redis_url_carries_the_required_password() -> None:
    urls = [s["environment"]["DEVLOOP_REDIS_URL"] for s in SERVICES.values()
            if "DEVLOOP_REDIS_URL" in s.get("environment", {})]
    assert len(urls) == 3  # coder, tester, flower
    for url in urls:
        assert url.startswith("redis://:${DEVLOOP_REDIS_PASSWORD:?")
        assert interpolate(url, {"DEVLOOP_REDIS_PASSWORD": "pw"}) == "redis://:pw@redis:6379/0"


def test_devloop_processes_run_as_a_non_root_user() -> None:
    for name in ("coder", "tester", "flower"):
        assert SERVICES[name]["user"] == "devloop", name
    assert SERVICES["redis"]["user"] == "redis"
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert users and users[-1] == "devloop"
    assert "useradd" in DOCKERFILE and "--uid 10001" in DOCKERFILE
    # The worker writes its cache (views, the sandbox's /etc): the toolchains are built by it.
    assert DOCKERFILE.index("USER devloop") < DOCKERFILE.index("devloop toolchain install")


@pytest.fixture
def compose_redis(tmp_path: Path) -> Any:
    """The compose file's redis command, run as its container would, on a local port."""
    password = secrets.token_hex(24)
    script = interpolate(SERVICES["redis"]["command"][2], {})
    assert SERVICES["redis"]["command"][:2] == ["sh", "-c"] and "requirepass" in script
    config = tmp_path / "redis-auth.conf"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Only what a container provides differently: where the config goes, the port, the dir.
    script = script.replace("/tmp/redis-auth.conf", str(config))
    script += f' --port {port} --bind 127.0.0.1 --dir {tmp_path} --save ""'
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(redis_executable())
    env = {**os.environ, "REDIS_PASSWORD": password, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen(["sh", "-c", script], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield port, password, proc, config
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_compose_redis_requires_its_password_and_shows_it_nowhere(compose_redis: Any) -> None:
    port, password, proc, config = compose_redis
    assert_password_required(port, password, proc.pid)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


# --- limits and the seccomp profile (issue 26, item 7) ---------------------------------

PROFILE = "deploy/seccomp-bwrap.json"
WORKER_UID = worker_uid()  # plays the image's uid 10001: a non-root worker


def test_every_service_has_memory_and_process_limits_and_no_swap_beyond_them() -> None:
    for name, service in SERVICES.items():
        assert service.get("pids_limit", 0) > 0, name
        assert service.get("mem_limit"), name
        assert service["memswap_limit"] == service["mem_limit"], name
    # A worker holds -c 2 sandboxed commands of 256 processes and 4 GiB each, and itself.
    for name in ("coder", "tester"):
        assert SERVICES[name]["pids_limit"] >= 2 * 256 + 256
        assert SERVICES[name]["mem_limit"] == "10g"


def test_workers_run_under_the_shipped_seccomp_profile_never_unconfined() -> None:
    for name in ("Dockerfile", "Procfile", *DOC_PAGES):
        assert "--security-opt seccomp=unconfined" not in (REPO / name).read_text(), name
    for service in SERVICES.values():
        assert "seccomp=unconfined" not in service.get("security_opt", [])
        assert "seccomp:unconfined" not in service.get("security_opt", [])
    for name in ("coder", "tester"):
        assert f"seccomp={PROFILE}" in SERVICES[name]["security_opt"], name
    profile = json.loads((REPO / PROFILE).read_text())
    added = [r for r in profile["syscalls"] if r not in stock(profile)["syscalls"]]
    # Docker's default profile plus one rule, for the calls bubblewrap makes, and no more.
    assert [sorted(r["names"]) for r in added] == [
        ["clone", "mount", "pivot_root", "sethostname", "umount", "umount2", "unshare"]
    ]
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    # The image has what builds the sandbox's own filter and sets its process limit.
    assert "libseccomp2 util-linux" in DOCKERFILE


@pytest.mark.timeout(120)
def test_the_compose_seccomp_profile_lets_the_sandbox_work_where_dockers_default_does_not(
    tmp_path: Path,
) -> None:
    """A non-root worker under each profile builds a sandbox and runs a command in it."""
    profile = json.loads((REPO / PROFILE).read_text())
    docker_default = tmp_path / "default.json"
    docker_default.write_text(json.dumps(stock(profile)))
    filter_bpf()  # built here: the child may not reach the venv to load it
    outcomes = {}
    for name, path in (("default", docker_default), ("shipped", REPO / PROFILE)):
        cache, bwrap = worker_cache(WORKER_UID)

        def as_worker(cache: Path = cache, bwrap: Path = bwrap) -> str:
            settings = Settings(cache_dir=cache, views_dir=cache / "views", bwrap=bwrap)
            try:
                sandbox = BwrapSandbox(settings)
            except SandboxUnavailable as exc:
                return f"unavailable: {exc}"
            view = new_view_dir(settings, prefix="compose-")
            obs = sandbox.run("id -u; grep 'Max processes' /proc/self/limits", view=view,
                              cwd="", writable=[])
            return f"exit {obs.exit_code}: {obs.stdout}{obs.stderr}"

        try:
            outcomes[name] = run_as(WORKER_UID, as_worker, timeout_s=90, profile=path)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    assert outcomes["default"].startswith("unavailable: bubblewrap"), outcomes
    assert outcomes["shipped"].startswith(f"exit 0: {WORKER_UID}\nMax processes"), outcomes
    assert outcomes["shipped"].split()[5:7] == ["256", "256"], outcomes
