"""The broker's listeners: the only module that owns listening sockets.

One asyncio server per configured listener (``listeners``), each handing accepted
sockets to a ``Connection``. Also owns the broker-wide request accounting behind
queued.max.requests (connections pause reading while the broker is at the limit) and the
idle sweep behind connections.max.idle.ms.

Binding, as Kafka binds: a listener with an empty host (``PLAINTEXT://:9092``) or ``::``
listens on every interface, IPv4 and IPv6, through one dual-stack socket (so one port,
even when the port is 0); ``0.0.0.0`` listens on every IPv4 interface only; a name is
resolved and bound at its first address. Only PLAINTEXT listeners can be served: klog has
no TLS or SASL, and a listener configured as SSL/SASL is refused at start rather than
served in plaintext under a name that promises otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from klog.daemon.connection import Connection
from klog.protocol import apis

if TYPE_CHECKING:
    from klog.daemon.broker import Broker
    from klog.daemon.config import Endpoint

log = logging.getLogger(__name__)


class Server:
    def __init__(self, broker: Broker, handlers: Mapping[int, Any]) -> None:
        config = broker.config
        self.broker = broker
        self.handlers = handlers
        # A standalone broker has no peer that could send it the inter-broker control
        # APIs (its controller calls it in-process): it neither announces nor accepts them,
        # so such a request closes the connection before it is decoded. In cluster mode
        # they are served, to the controller only (klog/daemon/controller/identity.py).
        self.advertised = (apis.ADVERTISED if config.zookeeper_connect
                           else apis.STANDALONE_ADVERTISED)
        self.max_request_bytes = config.socket_request_max_bytes
        self.queued_max_requests = max(1, config.queued_max_requests)
        self.connections_max_idle_ms = config.connections_max_idle_ms
        self.connections: set[Connection] = set()
        self.paused: set[Connection] = set()
        self.queued = 0
        self.bound: dict[str, tuple[str, int]] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self._idle_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        check_listeners(self.broker.config.listeners)
        for endpoint in self.broker.config.listeners:
            name = endpoint.listener_name
            sock = await listen_socket(endpoint.host, endpoint.port)
            try:
                server = await loop.create_server(
                    lambda name=name: Connection(self, name),  # type: ignore[misc]
                    sock=sock, backlog=1024,
                    # Bound now (the port is known and registered), accepting only once the
                    # broker is ready: Kafka too serves no request before start-up ends.
                    start_serving=False,
                )
            except BaseException:
                sock.close()
                raise
            bound_port = sock.getsockname()[1]
            self.bound[name] = (endpoint.host, bound_port)
            self._servers.append(server)
            log.info("listening on %s://%s:%d", name, _display(sock), bound_port)
        self._idle_task = loop.create_task(self._idle_sweep())

    async def serve(self) -> None:
        """Start accepting connections on every listener (after ``start``)."""
        for server in self._servers:
            await server.start_serving()

    def request_done(self) -> None:
        self.queued -= 1
        if self.paused and self.queued < self.queued_max_requests:
            for conn in list(self.paused):
                conn.update_reading()

    async def _idle_sweep(self) -> None:
        limit = self.connections_max_idle_ms / 1000
        interval = min(max(limit / 10, 0.01), 1.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if (not conn.busy and not conn.queue and not conn.deferred
                        and now - conn.last_active > limit):
                    log.debug("closing idle connection from %s", conn.peer)
                    conn.close()

    async def stop_accepting(self) -> None:
        # Not wait_closed(): it waits for every connection, and close() ends those itself.
        for server in self._servers:
            server.close()
        self._servers.clear()

    async def close(self) -> None:
        """Stop accepting, close every connection, and end their request processing (a
        request still waiting -- a long poll, acks=-1 -- has no one left to answer)."""
        await self.stop_accepting()
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        tasks = [t for t in (conn.task for conn in self.connections)
                 if t is not None and not t.done()]
        for conn in list(self.connections):
            conn.close()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)


class ListenerError(RuntimeError):
    """A listener this broker cannot serve (one line naming it and why)."""


def check_listeners(listeners: Sequence[Endpoint]) -> None:
    """Refuse listeners whose security protocol klog does not implement."""
    for endpoint in listeners:
        if endpoint.security_protocol != "PLAINTEXT":
            raise ListenerError(
                f"listener {endpoint.connection_string} uses security protocol "
                f"{endpoint.security_protocol}, which klog does not support (only "
                "PLAINTEXT); map it to PLAINTEXT in listener.security.protocol.map or "
                "remove it"
            )


async def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, not yet listening, TCP socket for a listener's host and port."""
    if host in _ALL_INTERFACES:
        try:
            return _bind(socket.AF_INET6, ("::", port), dual_stack=True)
        except OSError:
            if host == "::":
                raise
            # no IPv6 on this machine: every IPv4 interface is "every interface"
            return _bind(socket.AF_INET, ("0.0.0.0", port))
    if host == "0.0.0.0":
        return _bind(socket.AF_INET, (host, port))
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    if not infos:  # pragma: no cover - getaddrinfo raises instead
        raise OSError(f"cannot resolve listener host {host!r}")
    family, _type, _proto, _canon, address = infos[0]
    return _bind(family, address)


_ALL_INTERFACES = ("", "::")


def _bind(family: int, address: Any, dual_stack: bool = False) -> socket.socket:
    # proto named, not 0: accepted sockets copy it, and asyncio turns Nagle off
    # (TCP_NODELAY, as Kafka does) only on sockets whose proto is IPPROTO_TCP. With Nagle
    # on, an answer written while the previous one is unacknowledged waits for the client's
    # delayed ACK, 40 ms on Linux.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        # Set before listen(): accepted sockets inherit it, and the TCP window scale is
        # chosen from it during the handshake.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _display(sock: socket.socket) -> str:
    host = sock.getsockname()[0]
    return f"[{host}]" if ":" in host else host
