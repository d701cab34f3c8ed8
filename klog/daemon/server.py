"""The broker's listeners: the only module that owns listening sockets.

One asyncio server per configured listener (``listeners``), each handing accepted
sockets to a ``Connection``. Also owns the broker-wide request accounting behind
queued.max.requests (connections pause reading while the broker is at the limit) and the
idle sweep behind connections.max.idle.ms.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from klog.daemon.connection import Connection
from klog.protocol import apis

if TYPE_CHECKING:
    from klog.daemon.broker import Broker

log = logging.getLogger(__name__)


class Server:
    def __init__(self, broker: Broker, handlers: Mapping[int, Any]) -> None:
        config = broker.config
        self.broker = broker
        self.handlers = handlers
        self.advertised = apis.ADVERTISED
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
        for endpoint in self.broker.config.listeners:
            host = endpoint.host or "0.0.0.0"
            name = endpoint.listener_name
            server = await loop.create_server(
                lambda name=name: Connection(self, name),  # type: ignore[misc]
                host=host, port=endpoint.port, reuse_address=True, backlog=1024,
                family=socket.AF_INET6 if ":" in host else socket.AF_INET,
            )
            for sock in server.sockets:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            bound_port = server.sockets[0].getsockname()[1]
            self.bound[name] = (host, bound_port)
            self._servers.append(server)
            log.info("listening on %s://%s:%d", name, host, bound_port)
        self._idle_task = loop.create_task(self._idle_sweep())

    def request_done(self) -> None:
        self.queued -= 1
        if self.paused and self.queued < self.queued_max_requests:
            for conn in list(self.paused):
                conn.resume_reading()

    async def _idle_sweep(self) -> None:
        limit = self.connections_max_idle_ms / 1000
        interval = min(max(limit / 10, 0.01), 1.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if not conn.busy and not conn.queue and now - conn.last_active > limit:
                    log.debug("closing idle connection from %s", conn.peer)
                    conn.close()

    async def stop_accepting(self) -> None:
        # Not wait_closed(): it waits for every connection, and close() ends those itself.
        for server in self._servers:
            server.close()
        self._servers.clear()

    async def close(self) -> None:
        await self.stop_accepting()
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        for conn in list(self.connections):
            conn.close()
