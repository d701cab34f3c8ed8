"""Broker config values: their types, errors, sources and text forms.

This module owns the vocabulary every other part of klog.daemon.config shares: the limits
(INT_MAX, LONG_MAX), ``ConfigError`` (one line naming the key and the bad value), the
DescribeConfigs ids (``ConfigSource``, ``ConfigType``), the dynamic update modes, and the
parsing and formatting of one value by its ``ConfigSpec`` (``parse_value``,
``format_value``, ``java_double``), Kafka's ConfigDef rules.
"""

from __future__ import annotations

import re
from decimal import Decimal
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from klog.daemon.config.specs import ConfigSpec


INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_RANGES = {"INT": 2**31, "SHORT": 2**15, "LONG": 2**63}

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_MINUTE = 60 * 1000
_HOUR = 60 * _MINUTE


class ConfigError(ValueError):
    """A bad configuration: the message is one line naming the key and the bad value."""


class ConfigSource(IntEnum):
    """DescribeConfigs' config_source ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


class ConfigType(IntEnum):
    """DescribeConfigs' config_type ids (Kafka's ConfigDef types)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


# Dynamic update modes (Kafka's "read-only", "per-broker", "cluster-wide"), plus the SSL
# store settings that Kafka lets change only per listener (listener.name.<l>.<config>).
READ_ONLY = "read-only"
PER_BROKER = "per-broker"
CLUSTER_WIDE = "cluster-wide"
PER_LISTENER = "per-listener"


# -- value parsing and formatting ------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")


def _bad(name: str, value: object, reason: str) -> ConfigError:
    return ConfigError(f"invalid value {value!r} for configuration {name}: {reason}")


def _csv(text: str) -> list[str]:
    return [item for item in re.split(r"\s*,\s*", text.strip()) if item]


def parse_connection_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: ``host:count,host:count`` -> {host: count}.

    As Kafka's ``Csv.parseCsvMap``: entries split at commas, each at its last colon (so an
    IPv6 address keeps its own colons); a count that is not a non-negative int is an error.
    """
    name = "max.connections.per.ip.overrides"
    overrides: dict[str, int] = {}
    for entry in _csv(text):
        host, sep, count = entry.rpartition(":")
        host, count = host.strip(), count.strip()
        if not sep or not host or not _INT_RE.fullmatch(count) or not 0 <= int(count) < 2**31:
            raise _bad(name, text, f"entry {entry!r} is not host:count")
        overrides[host] = int(count)
    return overrides


def parse_value(spec: ConfigSpec, raw: str) -> Any:
    """Parse one broker config value from its string form (ConfigDef's rules)."""
    name, text, kind = spec.name, raw.strip(), spec.type
    value: Any
    if kind is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise _bad(name, raw, "expected true or false")
        value = text.lower() == "true"
    elif kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        if not _INT_RE.fullmatch(text):
            raise _bad(name, raw, f"not a number of type {kind.name}")
        value = int(text)
        bound = _RANGES[kind.name]
        if not -bound <= value < bound:
            raise _bad(name, raw, f"out of range for type {kind.name}")
    elif kind is ConfigType.DOUBLE:
        if not _DOUBLE_RE.fullmatch(text):
            raise _bad(name, raw, "not a number of type DOUBLE")
        value = float(text.rstrip("dDfF"))
    elif kind is ConfigType.LIST:
        value = _csv(text)
        if spec.choices:
            value = [_choose(spec, item, raw) for item in value]
    else:  # STRING, CLASS, PASSWORD
        value = text
        if spec.choices:
            value = _choose(spec, text, raw)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if spec.minimum is not None and value < spec.minimum:
            raise _bad(name, raw, f"value must be at least {_number(spec.minimum)}")
        if spec.maximum is not None and value > spec.maximum:
            raise _bad(name, raw, f"value must be no more than {_number(spec.maximum)}")
    return value


def _choose(spec: ConfigSpec, text: str, raw: str) -> str:
    assert spec.choices is not None
    if text in spec.choices:
        return text
    if spec.ignore_case:
        for choice in spec.choices:
            if choice.lower() == text.lower():
                return choice
    raise _bad(spec.name, raw, f"must be one of {', '.join(spec.choices)}")


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def format_value(kind: ConfigType, value: Any) -> str | None:
    """A typed value as Kafka prints it (ConfigDef.convertToString)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) or kind is ConfigType.DOUBLE:
        return java_double(float(value))
    return str(value)


def java_double(d: float) -> str:
    """Java's Double.toString: plain for 1e-3 <= |d| < 1e7, else ``1.0E10`` style."""
    if d != d:
        return "NaN"
    if d in (float("inf"), float("-inf")):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if str(d).startswith("-") else "0.0"
    if 1e-3 <= abs(d) < 1e7:
        return repr(d)  # Python's shortest repr is plain, with ".0", in this range
    sign, digits, exponent = Decimal(repr(d)).as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0") or "0"
    power = exponent + len(digits) - 1
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
