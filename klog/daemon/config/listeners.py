"""Listeners: ``NAME://host:port`` endpoints and the listener -> security protocol map.

This module owns ``Endpoint`` and the parsing of ``listeners`` / ``advertised.listeners``
and ``listener.security.protocol.map``, with Kafka's checks (known protocols, unique names
and ports), and the host name a wildcard listener advertises (``canonical_hostname``).
"""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from klog.daemon.config.values import SECURITY_PROTOCOLS, _bad, _csv

# -- listeners -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: ``PLAINTEXT://127.0.0.1:9092``.

    ``host`` "" means every interface; ``port`` 0 means "pick a free port" (the server
    knows the bound port; advertise it with ``dataclasses.replace(endpoint, port=...)``).
    """

    listener_name: str
    host: str
    port: int
    security_protocol: str

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.connection_string


# Kafka's endpoint grammar: NAME://host:port, IPv6 hosts optionally in brackets.
_ENDPOINT_RE = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def parse_protocol_map(text: str, config_name: str = "listener.security.protocol.map"
                       ) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL}; names upper-cased like Kafka's."""
    result: dict[str, str] = {}
    for item in _csv(text):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise _bad(config_name, text, f"entry {item!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise _bad(
                config_name, text,
                f"invalid security protocol {protocol!r} "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})",
            )
        result[name] = protocol
    return result


def parse_listeners(
    text: str,
    protocol_map: Mapping[str, str],
    *,
    config_name: str = "listeners",
    require_distinct_ports: bool = True,
) -> list[Endpoint]:
    """Parse a comma-separated listener list (``listeners`` or ``advertised.listeners``)."""
    endpoints: list[Endpoint] = []
    for item in _csv(text):
        match = _ENDPOINT_RE.fullmatch(item)
        if match is None:
            raise _bad(config_name, item, "expected LISTENER_NAME://host:port")
        name = match[1].strip().upper()
        if not name:
            raise _bad(config_name, item, "missing listener name")
        protocol = protocol_map.get(name)
        if protocol is None:
            raise _bad(
                config_name, item,
                f"no security protocol for listener name {name} "
                "(known names come from listener.security.protocol.map: "
                f"{', '.join(protocol_map)})",
            )
        port = int(match[3])
        if not 0 <= port <= 65535:
            raise _bad(config_name, item, f"port {port} is not in 0..65535")
        endpoints.append(Endpoint(name, match[2], port, protocol))
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise _bad(config_name, text, "each listener must have a different name")
    ports = [e.port for e in endpoints if e.port != 0]
    if require_distinct_ports and len(set(ports)) != len(ports):
        raise _bad(config_name, text, "each listener must have a different port")
    return endpoints


@functools.cache
def canonical_hostname() -> str:
    """This machine's fully qualified name (what an empty-host listener advertises)."""
    try:
        name = socket.getfqdn()
    except OSError:
        name = ""
    return name or "127.0.0.1"
