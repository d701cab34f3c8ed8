"""BrokerConnections: one connection from this broker to each other broker, for one purpose.

The transaction components talk to other brokers on the inter-broker listener, with its
TLS and SASL settings: the coordinator sends WriteTxnMarkers to partition leaders
(markers.py), and a partition leader asks the coordinator whether a transactional write is
in its transaction (AddPartitionsToTxn v4+, verification.py). Each keeps its own
connections, as Kafka gives each its own network client: a slow marker send never holds a
produce's verification.

A connection is made on first use (its broker's inter-broker endpoint from ``endpoint``),
reused while it lives, and dropped by the caller when a request on it fails; the next use
connects again. Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from klog.client.errors import KafkaClientError
from klog.client.network import BrokerConnection
from klog.client.security import ClientSecurity

if TYPE_CHECKING:
    from klog.daemon.config.dynamic import DynamicBrokerConfig


class BrokerConnections:
    """See the module docstring. ``purpose`` names the connections in their client id."""

    def __init__(self, broker_id: int, purpose: str, config: DynamicBrokerConfig,
                 endpoint: Callable[[int], Awaitable[tuple[str, int] | None]],
                 security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self.client_id = f"broker-{broker_id}-{purpose}"
        self._config = config
        #: The inter-broker listener's TLS and SASL (None: PLAINTEXT).
        self.security = security
        # (host, port) of a broker on the inter-broker listener.
        self._endpoint = endpoint
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    @property
    def timeout_s(self) -> float:
        """request.timeout.ms, for connecting and for each request."""
        return max(self._config.current.request_timeout_ms, 100) / 1000

    async def get(self, broker_id: int) -> BrokerConnection:
        """The live connection to ``broker_id``, made now if there is none; raises
        KafkaClientError (or OSError) when it cannot be made."""
        lock = self._connecting.setdefault(broker_id, asyncio.Lock())
        async with lock:
            conn = self._connections.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            address = await self._endpoint(broker_id)
            if address is None:
                raise KafkaClientError(f"broker {broker_id} has no known endpoint")
            conn = BrokerConnection(broker_id, *address, client_id=self.client_id,
                                    security=self.security)
            await conn.connect(self.timeout_s)
            self._connections[broker_id] = conn
            return conn

    def drop(self, broker_id: int) -> None:
        """Close the connection to ``broker_id`` (after a failure): the next use reconnects."""
        conn = self._connections.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for broker_id in list(self._connections):
            self.drop(broker_id)
