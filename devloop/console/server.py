"""Serve the console with uvicorn on sockets DevLoop bound (127.0.0.1 unless told otherwise)
and say where it is."""

from __future__ import annotations

import socket

import uvicorn

from devloop.console.app import ConsoleConfig, make_app
from devloop.console.auth import LOOPBACK

GRACE_S = 3  # open event streams get this long to close on shutdown


def base_url(host: str, port: int) -> str:
    """The console's address, as a browser on this machine would open it."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
    return f"http://{shown}:{port}"


def link(host: str, port: int, token: str) -> str:
    """The Jupyter-style link printed once at start: the token goes in the URL once."""
    return f"{base_url(host, port)}/?token={token}"


def hosts_for(host: str) -> tuple[str, ...] | None:
    """Host names the console answers to: loopback names, and the address it listens on
    (any name when it listens on every address)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    return (*LOOPBACK, host.lower())


def serve(config: ConsoleConfig, sockets: list[socket.socket]) -> None:
    """Run the console on the bound sockets (devloop.console.listen) until a signal stops it:
    uvicorn never binds a port itself, so the printed link is always this server's."""
    server = uvicorn.Server(uvicorn.Config(
        make_app(config), port=config.port, log_level="warning",
        timeout_graceful_shutdown=GRACE_S, proxy_headers=False, server_header=False,
    ))
    server.run(sockets=sockets)
