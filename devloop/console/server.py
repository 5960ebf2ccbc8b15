"""Serve the console with uvicorn on sockets DevLoop bound (127.0.0.1 unless told otherwise)
and say where it is."""

from __future__ import annotations

import socket

import uvicorn

from devloop.console.app import ConsoleConfig, make_app

GRACE_S = 3  # open event streams get this long to close on shutdown


def serve(config: ConsoleConfig, sockets: list[socket.socket]) -> None:
    """Run the console on the bound sockets (devloop.console.listen) until a signal stops it:
    uvicorn never binds a port itself, so the printed link is always this server's."""
    server = uvicorn.Server(uvicorn.Config(
        make_app(config), port=config.port, log_level="warning",
        timeout_graceful_shutdown=GRACE_S, proxy_headers=False, server_header=False,
    ))
    server.run(sockets=sockets)
