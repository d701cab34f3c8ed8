"""Topic-level log configuration: Kafka's LogConfig names, defaults and validation.

This module owns the per-partition settings the storage engine obeys (segment size and
age, retention, flushing, index spacing, ...). Names are Kafka's topic config names
(``segment.bytes``); attributes are the same words in snake_case (``segment_bytes``).
Defaults are Kafka 3.x's. ``LogConfig.from_properties`` takes the string (or already typed)
values of a properties file or an AlterConfigs request and validates types and ranges with
errors that name the key. Broker-level ``log.*`` defaults are mapped by the daemon's
config module, not here.

A LogConfig is an immutable value: a config change builds a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# Kafka's LegacyRecord.RECORD_OVERHEAD_V0: the smallest a segment may be.
MIN_SEGMENT_BYTES = 14

CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


class LogConfigError(ValueError):
    """An invalid topic config value (Kafka's ConfigException / INVALID_CONFIG)."""


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    kind: str  # "int", "long", "bool", "double", "string", "list"
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


# attribute -> spec (the Kafka name, type, and range Kafka's ConfigDef declares)
_SPECS: dict[str, _Spec] = {
    "segment_bytes": _Spec("segment.bytes", "int", MIN_SEGMENT_BYTES),
    "segment_ms": _Spec("segment.ms", "long", 1),
    "segment_jitter_ms": _Spec("segment.jitter.ms", "long", 0),
    "segment_index_bytes": _Spec("segment.index.bytes", "int", 4),
    "index_interval_bytes": _Spec("index.interval.bytes", "int", 0),
    "flush_messages": _Spec("flush.messages", "long", 1),
    "flush_ms": _Spec("flush.ms", "long", 0),
    "retention_bytes": _Spec("retention.bytes", "long"),
    "retention_ms": _Spec("retention.ms", "long", -1),
    "max_message_bytes": _Spec("max.message.bytes", "int", 0),
    "file_delete_delay_ms": _Spec("file.delete.delay.ms", "long", 0),
    "delete_retention_ms": _Spec("delete.retention.ms", "long", 0),
    "min_compaction_lag_ms": _Spec("min.compaction.lag.ms", "long", 0),
    "max_compaction_lag_ms": _Spec("max.compaction.lag.ms", "long", 1),
    "min_cleanable_dirty_ratio": _Spec("min.cleanable.dirty.ratio", "double", 0, 1),
    "cleanup_policy": _Spec("cleanup.policy", "list", choices=CLEANUP_POLICIES),
    "compression_type": _Spec("compression.type", "string", choices=COMPRESSION_TYPES),
    "message_timestamp_type": _Spec("message.timestamp.type", "string", choices=TIMESTAMP_TYPES),
    "message_timestamp_difference_max_ms": _Spec("message.timestamp.difference.max.ms", "long", 0),
    "message_timestamp_before_max_ms": _Spec("message.timestamp.before.max.ms", "long", 0),
    "message_timestamp_after_max_ms": _Spec("message.timestamp.after.max.ms", "long", 0),
    "message_downconversion_enable": _Spec("message.downconversion.enable", "bool"),
    "min_insync_replicas": _Spec("min.insync.replicas", "int", 1),
    "preallocate": _Spec("preallocate", "bool"),
    "unclean_leader_election_enable": _Spec("unclean.leader.election.enable", "bool"),
    "message_format_version": _Spec("message.format.version", "string"),
}

_BY_NAME = {spec.name: attr for attr, spec in _SPECS.items()}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's topic-level log settings with Kafka 3.x defaults."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_bytes: int = -1
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    max_message_bytes: int = 1024 * 1024 + 12  # 1048588
    file_delete_delay_ms: int = 60_000
    delete_retention_ms: int = 24 * 60 * 60 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_downconversion_enable: bool = True
    min_insync_replicas: int = 1
    preallocate: bool = False
    unclean_leader_election_enable: bool = False
    message_format_version: str = "3.0-IV1"

    # -- derived values ------------------------------------------------------------------

    @property
    def max_index_size(self) -> int:
        return self.segment_index_bytes

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Kafka's LogConfig.maxSegmentMs: a compacted log rolls at max.compaction.lag.ms
        too, since the cleaner never touches the active segment."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far behind the broker's clock a CreateTime timestamp may be: Kafka 3.6+'s
        messageTimestampBeforeMaxMs -- message.timestamp.before.max.ms, or, while that is
        left at its default, message.timestamp.difference.max.ms (KIP-937)."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far ahead of the broker's clock a CreateTime timestamp may be (as
        ``timestamp_before_max_ms``, with message.timestamp.after.max.ms)."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_limits(self) -> tuple[int, int] | None:
        """(before, after) ms: how far from the broker's clock a produced CreateTime
        timestamp may be; None when nothing is checked (LogAppendTime, or no limit).
        Read for every produced batch: the usual answer (no limit) costs no more calls."""
        difference = self.message_timestamp_difference_max_ms
        before = self.message_timestamp_before_max_ms
        after = self.message_timestamp_after_max_ms
        if (difference == before == after == LONG_MAX
                or self.message_timestamp_type == "LogAppendTime"):
            return None
        # as timestamp_before_max_ms / timestamp_after_max_ms, without their calls
        return (difference if before == LONG_MAX else before,
                difference if after == LONG_MAX else after)

    def random_segment_jitter(self, rand: float) -> int:
        """Kafka's randomSegmentJitter for ``rand`` in [0, 1): never more than segment.ms."""
        if self.segment_jitter_ms == 0:
            return 0
        return int(rand * min(self.segment_jitter_ms, self.segment_ms))

    # -- conversion ----------------------------------------------------------------------

    @classmethod
    def from_properties(
        cls,
        props: Mapping[str, Any],  # Any: text from files/requests, or typed values from code
        *,
        base: LogConfig | None = None,
        ignore_unknown: bool = False,
    ) -> LogConfig:
        """Build a config from Kafka-named properties over ``base`` (default: Kafka's).

        Values may be strings (as in a properties file) or already typed. Raises
        LogConfigError naming the key for unknown names (unless ``ignore_unknown``), wrong
        types and out-of-range values.
        """
        changes: dict[str, Any] = {}
        for name, raw in props.items():
            attr = _BY_NAME.get(name)
            if attr is None:
                if ignore_unknown:
                    continue
                raise LogConfigError(f"unknown topic config name: {name}")
            changes[attr] = _parse(_SPECS[attr], raw)
        return replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """Kafka names -> string values, as a properties file or DescribeConfigs shows them."""
        out: dict[str, str] = {}
        for f in fields(self):
            spec = _SPECS[f.name]
            value = getattr(self, f.name)
            if spec.kind == "bool":
                out[spec.name] = "true" if value else "false"
            elif spec.kind == "list":
                out[spec.name] = ",".join(value)
            else:
                out[spec.name] = str(value)
        return out

    @staticmethod
    def names() -> list[str]:
        return [spec.name for spec in _SPECS.values()]


def _parse(spec: _Spec, raw: Any) -> Any:
    name = spec.name
    if spec.kind in ("int", "long"):
        if isinstance(raw, bool):
            raise LogConfigError(f"invalid value {raw!r} for configuration {name}: not a number")
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip()
            try:
                value = int(text)
            except ValueError:
                raise LogConfigError(
                    f"invalid value {raw!r} for configuration {name}: not a number"
                ) from None
        limit = INT_MAX if spec.kind == "int" else LONG_MAX
        if not -limit - 1 <= value <= limit:
            raise LogConfigError(
                f"invalid value {raw!r} for configuration {name}: out of range for an {spec.kind}"
            )
        _check_range(spec, value, raw)
        return value
    if spec.kind == "double":
        try:
            number = float(raw)
        except (TypeError, ValueError):
            raise LogConfigError(
                f"invalid value {raw!r} for configuration {name}: not a number"
            ) from None
        _check_range(spec, number, raw)
        return number
    if spec.kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise LogConfigError(
                f"invalid value {raw!r} for configuration {name}: expected true or false"
            )
        return text == "true"
    if spec.kind == "list":
        items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
        values = tuple(str(item).strip().lower() for item in items if str(item).strip())
        if not values:
            raise LogConfigError(f"invalid value {raw!r} for configuration {name}: empty list")
        for item in values:
            if spec.choices and item not in spec.choices:
                raise LogConfigError(
                    f"invalid value {item!r} for configuration {name}: "
                    f"must be one of {', '.join(spec.choices)}"
                )
        return values
    text = str(raw).strip()
    if spec.choices:
        # Kafka matches these case-sensitively for timestamp type, insensitively otherwise.
        lookup = {c.lower(): c for c in spec.choices}
        chosen = text if text in spec.choices else lookup.get(text.lower())
        if chosen is None or (spec.name == "message.timestamp.type" and text != chosen):
            raise LogConfigError(
                f"invalid value {raw!r} for configuration {name}: "
                f"must be one of {', '.join(spec.choices)}"
            )
        return chosen
    return text


def _check_range(spec: _Spec, value: float, raw: Any) -> None:
    if spec.minimum is not None and value < spec.minimum:
        raise LogConfigError(
            f"invalid value {raw!r} for configuration {spec.name}: "
            f"value must be at least {_fmt(spec.minimum)}"
        )
    if spec.maximum is not None and value > spec.maximum:
        raise LogConfigError(
            f"invalid value {raw!r} for configuration {spec.name}: "
            f"value must be no more than {_fmt(spec.maximum)}"
        )


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)
