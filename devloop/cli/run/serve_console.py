"""`devloop console`: the console over the project's Redis, with the callbacks that send
chains and revoke tasks through the task queue (devloop/console knows neither)."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console

from devloop.cli.run.people import webhook_settings
from devloop.console.address import base_url, hosts_for, link
from devloop.console.app import Callbacks, ConsoleConfig
from devloop.console.auth import new_token
from devloop.console.listen import adopt, listen
from devloop.console.server import serve
from devloop.core.config import Settings
from devloop.fleet.queue import TaskQueue
from devloop.fleet.webhook import Notifier
from devloop.server.embedded import redis_endpoint
from devloop.server.keeper import kept
from devloop.server.redis_server import connect
from devloop.store import RedisStore


def bind_console(
    host: str, port: int | None, fds: list[int], settings: Settings, out: Console
) -> tuple[list[socket.socket], int]:
    """The console's listening sockets and their port: handed down by `devloop run` (fds),
    else bound here (ListenFailed when --port is taken)."""
    if fds:
        sockets = adopt(fds)
        return sockets, int(sockets[0].getsockname()[1])
    listener = listen(host, settings.console_port if port is None else port,
                      explicit=port is not None, command="devloop console", option="--port")
    if listener.moved:
        out.print(listener.note(), markup=False, highlight=False, soft_wrap=True)
    return listener.sockets, listener.port


def serve_console(
    pid: str | None, folder: Path | None, host: str, sockets: list[socket.socket], port: int,
    settings: Settings, out: Console, queue: TaskQueue, keep_redis: bool = True,
) -> None:
    """Serve the console on its bound sockets until a signal stops it; print its link (with
    a fresh token) once. keep_redis: restart its Redis, or adopt a run's when it ends."""
    configured = settings.console_token.get_secret_value() if settings.console_token else None
    token = configured or new_token()
    with ExitStack() as stack:
        endpoint = stack.enter_context(redis_endpoint(folder or Path("."), settings))
        if keep_redis:
            stack.enter_context(kept(endpoint))
        queue.connect(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url), file_cap_bytes=settings.file_cap_bytes)
        notifier = None
        if settings.webhook_url is not None and pid is not None:
            notifier = Notifier(store, [pid], *webhook_settings(settings)).start()
        config = ConsoleConfig(
            store=store, redis_url=endpoint.url, token=token, port=port,
            callbacks=Callbacks(send=queue.send, revoke=queue.revoke),
            pids=[pid] if pid is not None else None, hosts=hosts_for(host),
            public_url=base_url(host, port),
            folder=str(folder.resolve()) if folder is not None else None,
        )
        shown = link(host, port, token) if configured is None else (
            f"{base_url(host, port)} (token from DEVLOOP_CONSOLE_TOKEN)")
        out.print(f"DevLoop console: {shown}", markup=False, highlight=False, soft_wrap=True)
        try:
            serve(config, sockets)
        finally:
            if notifier is not None:
                notifier.stop()
            store.close()
