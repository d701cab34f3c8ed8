"""The "klog" data source's options, parsed and checked, and the offset plan they imply.

This module owns the meaning of every option, as Spark's Kafka source defines it for batch
queries, and the planning that does not depend on where the data comes from:

- topics: exactly one of ``subscribe`` (comma-separated names), ``subscribePattern`` (a
  regular expression that must match the whole name) or ``assign`` (JSON
  ``{"topic": [0, 1]}``);
- ``startingOffsets``: ``earliest`` (the default) or JSON ``{"topic": {"0": 23, "1": -2}}``
  where -2 means earliest (``latest``, -1, is refused for a batch query, as Spark does);
- ``endingOffsets``: ``latest`` (the default) or JSON where -1 means latest (-2 refused);
- ``startingTimestamp`` / ``endingTimestamp``: milliseconds since the epoch, for every
  partition (the first offset whose timestamp is at or after it; they take precedence over
  the offset options, as in Spark);
- ``includeHeaders`` (false), ``minPartitions`` (none), ``kafka.isolation.level``
  (read_uncommitted, or read_committed);
- ``path`` (a log directory: offline) or ``kafka.bootstrap.servers`` (live), one of them;
- live: the client security settings prefixed ``kafka.``, as Spark's Kafka source passes
  ``kafka.*`` options to its consumers (``kafka.security.protocol``,
  ``kafka.sasl.mechanism``, ``kafka.ssl.truststore.location``, ...: klog/client/
  security.py's names); checked where they are used, by ClientSecurity.

Pure: no I/O. Bad options raise OptionsError with a message for the user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from klog.client.security import KNOWN_SETTINGS as SECURITY_SETTINGS

EARLIEST = -2
LATEST = -1


class OptionsError(ValueError):
    """An option the data source cannot accept; the message names it."""


@dataclass(frozen=True)
class SourceOptions:
    path: str | None = None
    bootstrap_servers: str | None = None
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    # None: the default (earliest / latest); else per (topic, partition) offsets.
    starting: dict[tuple[str, int], int] | None = None
    ending: dict[tuple[str, int], int] | None = None
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    include_headers: bool = False
    min_partitions: int | None = None
    read_committed: bool = False
    stats_dir: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    #: Client security settings under their Kafka names (without the ``kafka.`` prefix):
    #: plain strings, so that each Spark task builds its own TLS context from them.
    security: dict[str, str] = field(default_factory=dict)

    @property
    def offline(self) -> bool:
        return self.path is not None

    def select_topics(self, available: Sequence[str]) -> list[str]:
        """The topics this query reads, among ``available`` (sorted)."""
        if self.subscribe is not None:
            return sorted(set(self.subscribe))
        if self.assign is not None:
            return sorted(self.assign)
        pattern = re.compile(self.subscribe_pattern or "")
        return sorted(t for t in available if pattern.fullmatch(t))

    def select_partitions(
        self, partitions_of: Mapping[str, Sequence[int]]
    ) -> list[tuple[str, int]]:
        """The topic-partitions to read, given each selected topic's partitions."""
        out: list[tuple[str, int]] = []
        for topic, partitions in sorted(partitions_of.items()):
            if self.assign is not None:
                missing = sorted(set(self.assign.get(topic, ())) - set(partitions))
                if missing:
                    raise OptionsError(f"assign: {topic} has no partition(s) {missing}")
                out.extend((topic, p) for p in sorted(self.assign.get(topic, ())))
            else:
                out.extend((topic, p) for p in sorted(partitions))
        return out


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OptionsError(f"{name} must be true or false, not {text!r}")


def _int(name: str, text: str, minimum: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionsError(f"{name} must be an integer, not {text!r}") from None
    if minimum is not None and value < minimum:
        raise OptionsError(f"{name} must be at least {minimum}, not {value}")
    return value


def parse_offsets_json(name: str, text: str) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": 23}}`` -> ``{("topic", 0): 23}`` (Spark's per-partition JSON)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionsError(f"{name} is not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise OptionsError(f"{name} must be a JSON object of topics")
    out: dict[tuple[str, int], int] = {}
    for topic, partitions in raw.items():
        if not isinstance(partitions, dict):
            raise OptionsError(f"{name}: {topic!r} must map partitions to offsets")
        for partition, offset in partitions.items():
            try:
                p = int(partition)
            except ValueError:
                raise OptionsError(f"{name}: partition {partition!r} is not a number") from None
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
                raise OptionsError(f"{name}: offset {offset!r} of {topic}-{p} is not valid")
            out[(topic, p)] = offset
    return out


def _offsets(name: str, text: str | None, default: str) -> dict[tuple[str, int], int] | None:
    if text is None or text.strip().lower() == default:
        return None
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        raise OptionsError(
            f"{name} = {stripped.lower()} is not allowed for a batch query "
            f"(use {default} or per-partition JSON)"
        )
    offsets = parse_offsets_json(name, stripped)
    refused = LATEST if name == "startingOffsets" else EARLIEST
    for (topic, partition), offset in offsets.items():
        if offset == refused:
            raise OptionsError(
                f"{name}: {refused} ({'latest' if refused == LATEST else 'earliest'}) is not "
                f"allowed for {topic}-{partition} in a batch query"
            )
    return offsets


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check and parse the options a DataFrameReader passed (keys are case-insensitive)."""
    opts = {k.lower(): v for k, v in options.items()}
    path = opts.get("path")
    servers = opts.get("kafka.bootstrap.servers")
    if (path is None) == (servers is None):
        raise OptionsError("give exactly one of path (a log directory) or kafka.bootstrap.servers")
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k)]
    if len(chosen) != 1:
        raise OptionsError("give exactly one of subscribe, subscribePattern or assign")
    subscribe = pattern = assign = None
    if "subscribe" in chosen:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionsError("subscribe names no topic")
    elif "subscribepattern" in chosen:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionsError(f"subscribePattern is not a valid pattern: {exc}") from None
    else:
        try:
            raw = json.loads(opts["assign"])
        except json.JSONDecodeError as exc:
            raise OptionsError(f"assign is not valid JSON: {exc.msg}") from None
        if not isinstance(raw, dict) or not all(
            isinstance(v, list) and all(isinstance(p, int) for p in v) for v in raw.values()
        ):
            raise OptionsError('assign must look like {"topic": [0, 1]}')
        assign = {t: tuple(v) for t, v in raw.items()}
    isolation = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionsError(
            f"kafka.isolation.level must be read_uncommitted or read_committed, not {isolation!r}"
        )
    starting_ts = opts.get("startingtimestamp")
    ending_ts = opts.get("endingtimestamp")
    min_partitions = opts.get("minpartitions")
    return SourceOptions(
        path=path,
        bootstrap_servers=servers,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_offsets("startingOffsets", opts.get("startingoffsets"), "earliest"),
        ending=_offsets("endingOffsets", opts.get("endingoffsets"), "latest"),
        starting_timestamp=None
        if starting_ts is None
        else _int("startingTimestamp", starting_ts, 0),
        ending_timestamp=None if ending_ts is None else _int("endingTimestamp", ending_ts, 0),
        include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
        min_partitions=None
        if min_partitions is None
        else _int("minPartitions", min_partitions, 1),
        read_committed=isolation == "read_committed",
        stats_dir=opts.get("klog.statsdir"),
        security={k[len("kafka."):]: v for k, v in opts.items()
                  if k.startswith("kafka.") and k[len("kafka."):] in SECURITY_SETTINGS},
    )


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one topic-partition: the unit of a Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """What planning learnt of one topic-partition: its earliest and latest offsets and,
    when a timestamp option asked, the offsets of those timestamps (None: no such record)."""

    topic: str
    partition: int
    earliest: int
    latest: int
    start_by_timestamp: int | None = None
    end_by_timestamp: int | None = None

    def offset_range(self, options: SourceOptions) -> OffsetRange:
        tp = (self.topic, self.partition)
        start = resolve_start(options, tp, self.earliest, self.latest, self.start_by_timestamp)
        end = resolve_end(options, tp, self.earliest, self.latest, self.end_by_timestamp)
        return OffsetRange(self.topic, self.partition, start, max(start, end))


def resolve_start(
    options: SourceOptions, tp: tuple[str, int], earliest: int, latest: int,
    by_timestamp: int | None,
) -> int:
    """Where reading ``tp`` starts, clamped to [earliest, latest]."""
    if options.starting_timestamp is not None:
        start = latest if by_timestamp is None else by_timestamp
    elif options.starting is not None and tp in options.starting:
        wanted = options.starting[tp]
        start = earliest if wanted == EARLIEST else wanted
    elif options.starting is not None:
        raise OptionsError(f"startingOffsets does not name {tp[0]}-{tp[1]}")
    else:
        start = earliest
    return min(max(start, earliest), latest)


def resolve_end(
    options: SourceOptions, tp: tuple[str, int], earliest: int, latest: int,
    by_timestamp: int | None,
) -> int:
    """Where reading ``tp`` ends (exclusive), clamped to [earliest, latest]."""
    if options.ending_timestamp is not None:
        end = latest if by_timestamp is None else by_timestamp
    elif options.ending is not None and tp in options.ending:
        wanted = options.ending[tp]
        end = latest if wanted == LATEST else wanted
    elif options.ending is not None:
        raise OptionsError(f"endingOffsets does not name {tp[0]}-{tp[1]}")
    else:
        end = latest
    return min(max(end, earliest), latest)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split ranges so there are at least ``min_partitions`` of them, each range getting
    parts in proportion to its size (Spark's KafkaOffsetRangeCalculator does the same)."""
    nonempty = [r for r in ranges if r.size > 0]
    if not min_partitions or len(nonempty) >= min_partitions:
        return nonempty
    total = sum(r.size for r in nonempty)
    out: list[OffsetRange] = []
    for r in nonempty:
        parts = max(1, min(r.size, round(r.size / total * min_partitions)))
        step, extra = divmod(r.size, parts)
        start = r.start
        for i in range(parts):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out
