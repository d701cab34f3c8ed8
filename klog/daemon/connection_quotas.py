"""Connection limits: Kafka's ConnectionQuotas (max.connections and friends), without I/O.

Owns the broker's connection counts (per address, per listener, in total) and the
decisions the listeners' accept loops (``klog.daemon.server``) act on, as Kafka's acceptor
acts on its ConnectionQuotas:

- ``max.connections`` (broker-wide) and ``listener.name.<l>.max.connections`` (a
  listener's own, which defaults to the broker-wide value, as Kafka's
  ``valuesWithPrefixOverride`` makes it): at the limit a listener stops accepting -- new
  connections wait in the kernel's backlog -- until a connection closes (Kafka's acceptor
  blocks in ``waitForConnectionSlot``). The inter-broker listener, when there are several
  listeners, is "protected": only its own listener limit applies, so brokers and the
  controller still reach a broker that clients have filled up; a connection it accepts
  above the broker-wide limit makes the server close the least recently active client
  connection (Kafka's ``maxConnectionsExceeded`` / ``closeOldestConnection``).
- ``max.connection.creation.rate`` (broker-wide, not on the protected listener) and
  ``listener.name.<l>.max.connection.creation.rate``: above the rate a listener stops
  accepting for the time that brings the rate back under it. Kafka measures the rate over
  its quota window (samples of quota.window.size.seconds); this is a token bucket holding
  one second's worth of connections, which allows the same sustained rate and a burst of
  at most one second's allowance.
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``: a connection from
  an address already at its limit is accepted and closed at once (Kafka's
  TooManyConnectionsException). Override hosts that are names are resolved, as Kafka's
  ``InetAddress.getByName`` does, when the config is (re)read; IPv4 addresses seen through
  a dual-stack socket (``::ffff:a.b.c.d``) count as the IPv4 address, as in Java.

Not thread-safe: the event loop owns it.
"""

from __future__ import annotations

import ipaddress
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klog.daemon.config import BrokerConfig

UNLIMITED = 2**31 - 1  # Kafka's Int.MaxValue: "no limit" for every one of these configs


def normalize_address(host: str) -> str:
    """An address as the per-IP limits key it: IPv4-mapped IPv6 as plain IPv4, and one
    spelling of each IPv6 address."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _resolve(host: str) -> list[str]:
    try:
        return [normalize_address(str(ipaddress.ip_address(host)))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []  # Kafka fails the config; an unresolvable name here limits no one
    return sorted({normalize_address(str(info[4][0])) for info in infos})


class _Bucket:
    """A token bucket: ``rate`` connections per second, holding at most one second's."""

    __slots__ = ("rate", "stamp", "tokens")

    def __init__(self, rate: int, now: float) -> None:
        self.rate = rate
        self.tokens = float(rate)
        self.stamp = now

    def _refill(self, now: float) -> None:
        self.tokens = min(float(self.rate), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait(self, now: float) -> float:
        """Seconds until one connection may be taken (0 if now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self, now: float) -> None:
        self._refill(now)
        self.tokens -= 1


@dataclass(frozen=True)
class _Limits:
    broker_max: int
    broker_rate: int
    per_ip: int
    per_ip_overrides: dict[str, int]
    listener_max: dict[str, int]
    listener_rate: dict[str, int]
    protected: str | None  # the inter-broker listener, when there are several listeners


def limits_from_config(config: BrokerConfig) -> _Limits:
    listeners = [e.listener_name for e in config.listeners]
    overrides: dict[str, int] = {}
    for host, count in config.max_connections_per_ip_overrides.items():
        for address in _resolve(host):
            overrides[address] = count
    listener_max, listener_rate = {}, {}
    for name in listeners:
        own_max = config.listener_value(name, "max.connections")
        own_rate = config.listener_value(name, "max.connection.creation.rate")
        listener_max[name] = config.max_connections if own_max is None else own_max
        listener_rate[name] = config.max_connection_creation_rate if own_rate is None \
            else own_rate
    inter_broker = config.inter_broker_listener_name
    return _Limits(
        broker_max=config.max_connections,
        broker_rate=config.max_connection_creation_rate,
        per_ip=config.max_connections_per_ip,
        per_ip_overrides=overrides,
        listener_max=listener_max,
        listener_rate=listener_rate,
        protected=inter_broker if len(listeners) > 1 and inter_broker in listeners else None,
    )


class ConnectionQuotas:
    """The counts and limits; see the module docstring. ``configure`` (re)reads the
    limits from a BrokerConfig; counts survive it."""

    def __init__(self, config: BrokerConfig, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._clock = clock
        self._config = config
        self.limits = limits_from_config(config)
        self.total = 0
        self.per_listener: dict[str, int] = {}
        self.per_ip: dict[str, int] = {}
        self._broker_bucket: _Bucket | None = None
        self._listener_buckets: dict[str, _Bucket] = {}
        self._sync_buckets()

    def configure(self, config: BrokerConfig) -> None:
        """Take up a (dynamically) changed config; cheap when it is the same object."""
        if config is self._config:
            return
        self.limits = limits_from_config(config)
        self._config = config
        self._sync_buckets()

    def _sync_buckets(self) -> None:
        now = self._clock()
        rate = self.limits.broker_rate
        if rate >= UNLIMITED or rate <= 0:
            self._broker_bucket = None
        elif self._broker_bucket is None or self._broker_bucket.rate != rate:
            self._broker_bucket = _Bucket(rate, now)
        for name, rate in self.limits.listener_rate.items():
            bucket = self._listener_buckets.get(name)
            if rate >= UNLIMITED or rate <= 0:
                self._listener_buckets.pop(name, None)
            elif bucket is None or bucket.rate != rate:
                self._listener_buckets[name] = _Bucket(rate, now)

    def is_protected(self, listener: str) -> bool:
        return listener == self.limits.protected

    def slot_wait(self, listener: str) -> float:
        """Before accepting on ``listener``: 0 if a connection may be accepted now, else
        the seconds to wait for the creation rate, or ``math.inf`` when only a closing
        connection can make room (Kafka's ``waitForConnectionSlot``)."""
        limits = self.limits
        if self.per_listener.get(listener, 0) >= limits.listener_max.get(listener, UNLIMITED):
            return math.inf
        protected = self.is_protected(listener)
        if not protected and self.total >= limits.broker_max:
            return math.inf
        now = self._clock()
        wait = 0.0
        bucket = self._listener_buckets.get(listener)
        if bucket is not None:
            wait = bucket.wait(now)
        if not protected and self._broker_bucket is not None:
            wait = max(wait, self._broker_bucket.wait(now))
        return wait

    def inc(self, listener: str, address: str) -> int | None:
        """Count a connection accepted on ``listener`` from ``address`` (normalized). None
        if it may stay; else the per-address limit it exceeds -- it was not counted, and
        the caller closes it (Kafka's TooManyConnectionsException)."""
        now = self._clock()
        bucket = self._listener_buckets.get(listener)
        if bucket is not None:
            bucket.take(now)
        if not self.is_protected(listener) and self._broker_bucket is not None:
            self._broker_bucket.take(now)
        count = self.per_ip.get(address, 0)
        limit = self.limits.per_ip_overrides.get(address, self.limits.per_ip)
        if count >= limit:
            return limit
        self.per_ip[address] = count + 1
        self.per_listener[listener] = self.per_listener.get(listener, 0) + 1
        self.total += 1
        return None

    def dec(self, listener: str, address: str) -> None:
        count = self.per_ip.get(address, 0)
        if count <= 1:
            self.per_ip.pop(address, None)
        else:
            self.per_ip[address] = count - 1
        self.per_listener[listener] = max(0, self.per_listener.get(listener, 0) - 1)
        self.total = max(0, self.total - 1)

    def max_connections_exceeded(self) -> bool:
        """More connections than max.connections (the protected listener accepted beyond
        it): one connection of another listener should be closed."""
        return self.total > self.limits.broker_max
