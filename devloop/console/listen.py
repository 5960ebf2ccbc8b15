"""The console's listening sockets, bound by DevLoop before any link is printed.

A link with the token is printed only for a socket DevLoop holds: the caller binds here
first, prints the link for the port it got, and hands the sockets to the server (a child
of `devloop run` inherits them, so a restarted console serves the same bound port and
nobody can take it in between). A port asked for by name (`--port`, `--console-port`) that
another program holds is refused; the default port (DEVLOOP_CONSOLE_PORT) gives way to a
free one, said in a note.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from devloop.core.errors import DevLoopError, Problem

BACKLOG = 128
ATTEMPTS = 8  # tries for one free port on every address of a name (another program may race)


class ListenFailed(DevLoopError):
    """The console cannot listen where it was asked; `problem` says where and the fix."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


@dataclass
class Listener:
    """The bound, listening sockets of one console, and the port they share."""

    sockets: list[socket.socket]
    host: str
    port: int
    asked: int  # the port asked for (0: any): another when that one was taken

    @property
    def moved(self) -> bool:
        """Whether the asked port was taken and another one chosen."""
        return self.asked not in (0, self.port)

    def note(self) -> str:
        """The line that says the asked port was taken (when it was)."""
        return (f"console: port {self.asked} on {self.host or '*'} is taken by another "
                f"program; the console listens on port {self.port} instead")

    def fds(self) -> tuple[int, ...]:
        return tuple(s.fileno() for s in self.sockets)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def _addresses(host: str) -> list[tuple[int, str]]:
    """(family, address) of every address the console listens on for host."""
    if host == "::":
        return [(socket.AF_INET6, "::")]
    infos = socket.getaddrinfo(host or None, None, socket.AF_UNSPEC, socket.SOCK_STREAM,
                               0, socket.AI_PASSIVE)
    seen: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr[0]) not in seen:
            seen.append((family, str(sockaddr[0])))
    return seen


def _bind(family: int, address: str, port: int, dual: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Not SO_REUSEPORT: a port another socket listens on must stay refused.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # "::" alone also takes IPv4, so the printed 127.0.0.1 link reaches this socket.
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual else 1)
        sock.bind((address, port))
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def _bind_all(addresses: list[tuple[int, str]], port: int) -> list[socket.socket]:
    """One listening socket per address, all on port (0: a free one, the first's)."""
    bound: list[socket.socket] = []
    try:
        for family, address in addresses:
            bound.append(_bind(family, address, port, dual=address == "::" and
                               len(addresses) == 1))
            port = port or int(bound[0].getsockname()[1])
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def listen(host: str, port: int, *, explicit: bool, command: str, option: str) -> Listener:
    """Bind the console's sockets on host:port. A port another program holds: ListenFailed
    (naming command's option) when it was asked for by name, else a free port on the host."""
    try:
        addresses = _addresses(host)
    except OSError as exc:
        raise ListenFailed(Problem(command, option.replace("port", "host"),
                                   f"cannot listen on {host!r} ({exc})",
                                   "pass an address of this machine, e.g. 127.0.0.1")) from None
    try:
        sockets = _bind_all(addresses, port)
        return Listener(sockets, host, int(sockets[0].getsockname()[1]), port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise ListenFailed(Problem(command, option, f"cannot listen on {host}:{port} "
                                       f"({exc.strerror})", f"pass another {option} N")) from None
        if explicit:
            raise ListenFailed(Problem(
                command, option, f"port {port} on {host or '*'} is taken by another program",
                f"pass another {option} N, or leave {option} out to let DevLoop choose a free "
                "port")) from None
    for _ in range(ATTEMPTS):
        with contextlib.suppress(OSError):  # a name's other address lost a race: again
            sockets = _bind_all(addresses, 0)
            return Listener(sockets, host, int(sockets[0].getsockname()[1]), port)
    raise ListenFailed(Problem(command, option, f"no free port on {host}",
                               f"pass a free {option} N"))


def adopt(fds: list[int]) -> list[socket.socket]:
    """The listening sockets a parent handed down by fd (`devloop run` to its console)."""
    return [socket.socket(fileno=fd) for fd in fds]


@contextlib.contextmanager
def listening(host: str, port: int, *, explicit: bool, command: str,
              option: str) -> Iterator[Listener]:
    """listen() for a block; the sockets are closed after it."""
    listener = listen(host, port, explicit=explicit, command=command, option=option)
    try:
        yield listener
    finally:
        listener.close()
