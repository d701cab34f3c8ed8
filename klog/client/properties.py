"""Client settings from Kafka's property names: ``linger.ms=10`` -> ``linger_ms=10.0``.

One converter for the producer's and the consumer's tables (``PRODUCER_PROPERTIES``,
``CONSUMER_PROPERTIES``), as the CLI's ``-X``, ``--producer.config`` and
``--consumer.config`` take them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: Kafka property name -> (keyword of the klog client, converter of the text value).
PropertyTable = Mapping[str, tuple[str, Callable[[str], Any]]]


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, not {text!r}")
    return lowered == "true"


def keywords(properties: Mapping[str, str], table: PropertyTable, kind: str
             ) -> dict[str, Any]:
    """Keywords from Kafka property names; ValueError names the property that is unknown
    (listing the known ones) or has a bad value."""
    config: dict[str, Any] = {}
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
