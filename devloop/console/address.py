"""Where the console is: its address, the link printed once, the host names it answers to.

Apart from the server (server.py), so a command that only prints the link loads no web stack.
"""

from __future__ import annotations

from devloop.console.auth import LOOPBACK


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
