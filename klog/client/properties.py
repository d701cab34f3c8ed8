"""Client settings from Kafka's property names: ``linger.ms=10`` -> ``linger_ms=10.0``.

One converter for the producer's and the consumer's tables (``PRODUCER_PROPERTIES``,
``CONSUMER_PROPERTIES``), as the CLI's ``-X``, ``--producer.config`` and
``--consumer.config`` take them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from klog.client.security import KNOWN_SETTINGS as SECURITY_SETTINGS
from klog.client.security import ClientSecurity, SecurityConfigError

#: Kafka property name -> (keyword of the klog client, converter of the text value).
PropertyTable = Mapping[str, tuple[str, Callable[[str], Any]]]


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, not {text!r}")
    return lowered == "true"


def keywords(properties: Mapping[str, str], table: PropertyTable, kind: str, *,
             security: bool = False) -> dict[str, Any]:
    """Keywords from Kafka property names; ValueError names the property that is unknown
    (listing the known ones) or has a bad value. With ``security``, the client security
    settings among them (``security.protocol``, ``sasl.*``, ``ssl.*``: what Kafka's
    console tools take from --producer.config / --consumer.config) become one
    ``security`` keyword, a ClientSecurity."""
    config: dict[str, Any] = {}
    if security:
        settings = {k: v for k, v in properties.items() if k in SECURITY_SETTINGS}
        if settings:
            try:
                config["security"] = ClientSecurity.from_properties(settings)
            except SecurityConfigError as exc:
                raise ValueError(str(exc)) from None
            properties = {k: v for k, v in properties.items() if k not in settings}
    for name, text in properties.items():
        entry = table.get(name)
        if entry is None:
            raise ValueError(f"unknown {kind} property {name!r} (known: "
                             + ", ".join(sorted(table)) + ")")
        keyword, convert = entry
        try:
            config[keyword] = convert(text)
        except ValueError as exc:
            raise ValueError(f"bad value for {name}: {text!r} ({exc})") from None
    return config
