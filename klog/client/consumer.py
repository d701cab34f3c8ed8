"""klog's Kafka consumer: manual assignment, or group membership with subscribe().

Owns the consumer's public API: assign, subscribe / unsubscribe, seek (offset, beginning,
end, timestamp), position, commit / committed, offsets_for_times / beginning_offsets /
end_offsets, getmany / getone / async iteration, pause / resume, close. The fetching itself
(prefetch, offset resets, metadata refresh on leader moves) is
``klog.client.fetcher.Fetcher``'s; decoding of record data is ``klog.client.records``';
with a ``group_id``, membership, rebalances and committed offsets are
``klog.client.group_coordinator.ConsumerCoordinator``'s (getmany() waits for the first
assignment after subscribe()). One event loop; not thread-safe.

    async with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("t", 0)])
        async for record in consumer:
            ...

    async with Consumer("127.0.0.1:9092", group_id="app") as consumer:
        consumer.subscribe(["orders"])
        async for record in consumer:   # offsets auto-committed every 5 s
            ...
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klog.client.assignors import PartitionAssignor
from klog.client.errors import KafkaClientError
from klog.client.fetcher import (
    EARLIEST,
    LATEST,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Fetcher,
    NoOffsetForPartitionError,
    OffsetAndTimestamp,
    TopicPartition,
    reset_strategy,
)
from klog.client.group_coordinator import (
    ConsumerCoordinator,
    ConsumerRebalanceListener,
    OffsetAndMetadata,
)
from klog.client.network import KafkaClient
from klog.client.properties import boolean, keywords
from klog.client.records import ConsumerRecord, Deserializer
from klog.client.security import ClientSecurity
from klog.protocol.errors import ErrorCode

__all__ = [
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "TopicPartition",
    "measure_consume",
    "parse_offset_spec",
    "read_records",
    "seek_to_spec",
]

_ISOLATION = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


class Consumer:
    """An asyncio consumer of explicitly assigned partitions."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "klog-consumer",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        isolation_level: str = "read_uncommitted",
        auto_offset_reset: str = "latest",
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        check_crcs: bool = True,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        client: KafkaClient | None = None,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300000,
        partition_assignment_strategy: Sequence[str | PartitionAssignor] = (
            "range", "cooperative-sticky"),
        client_rack: str | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        if isolation_level not in _ISOLATION:
            raise ValueError(
                f"isolation_level must be read_uncommitted or read_committed, "
                f"not {isolation_level!r}")
        for name, value in (("fetch_min_bytes", fetch_min_bytes),
                            ("fetch_max_bytes", fetch_max_bytes),
                            ("max_partition_fetch_bytes", max_partition_fetch_bytes)):
            if value < (0 if name == "fetch_min_bytes" else 1):
                raise ValueError(f"{name} must be positive, not {value}")
        if fetch_max_wait_ms < 0:
            raise ValueError(f"fetch_max_wait_ms must not be negative, not {fetch_max_wait_ms}")
        self._own_client = client is None
        self._client = client if client is not None else KafkaClient(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms, security=security)
        # Any: Fetcher's and ConsumerCoordinator's keyword arguments, each its own type.
        self._fetcher_args: dict[str, Any] = dict(
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            isolation_level=_ISOLATION[isolation_level],
            default_reset=reset_strategy(auto_offset_reset),
            check_crcs=check_crcs,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            client_rack=client_rack,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._fetcher: Fetcher | None = None
        self._started = False
        self._closed = False
        # Group membership (subscribe, commit, committed): see ConsumerCoordinator.
        self._group_args: dict[str, Any] | None = None if group_id is None else dict(
            group_id=group_id,
            group_instance_id=group_instance_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            partition_assignment_strategy=partition_assignment_strategy,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            require_stable=isolation_level == "read_committed",
            client_rack=client_rack,
        )
        if self._group_args is not None:  # checked now rather than at the first subscribe
            ConsumerCoordinator.check_settings(**self._group_args)
        self._coordinator: ConsumerCoordinator | None = None

    # -- life cycle

    async def start(self) -> None:
        """Connect to the cluster (bootstrap and metadata). Called by ``async with``."""
        if self._closed:
            raise KafkaClientError("consumer is closed")
        if self._started:
            return
        await self._client.start()
        self._started = True

    async def close(self) -> None:
        """Stop fetching and close connections (the client's, when the consumer made it)."""
        if self._closed:
            return
        self._closed = True
        if self._coordinator is not None:
            await self._coordinator.close()
        if self._fetcher is not None:
            await self._fetcher.close()
        if self._own_client:
            await self._client.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def client(self) -> KafkaClient:
        return self._client

    @property
    def fetcher(self) -> Fetcher:
        if self._fetcher is None:
            self._fetcher = Fetcher(self._client, **self._fetcher_args)
        return self._fetcher

    async def _ready(self) -> Fetcher:
        if not self._started:
            await self.start()
        if self._closed:
            raise KafkaClientError("consumer is closed")
        return self.fetcher

    # -- metadata

    async def partitions_for_topic(self, topic: str) -> list[int] | None:
        """The topic's partition ids (None if the cluster does not know the topic)."""
        await self._ready()
        with contextlib.suppress(KafkaClientError):
            await self._client.refresh_metadata([topic])
        return self._client.cluster.partitions_for(topic)

    # -- group membership and committed offsets

    @property
    def coordinator(self) -> ConsumerCoordinator:
        """The group coordinator client (KafkaClientError without a group_id)."""
        if self._coordinator is None:
            if self._group_args is None:
                raise KafkaClientError("this consumer has no group_id")
            self._coordinator = ConsumerCoordinator(self._client, self.fetcher,
                                                    **self._group_args)
        return self._coordinator

    def subscribe(self, topics: Iterable[str] = (), *,
                  pattern: str | re.Pattern[str] | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        """Join the group and consume what it assigns from these topics (or every topic
        matching ``pattern``, a regular expression); replaces any earlier subscription.
        ``listener`` hears of revoked, assigned and lost partitions."""
        if self._closed:
            raise KafkaClientError("consumer is closed")
        if isinstance(topics, str):
            topics = [topics]
        coordinator = self.coordinator
        if not coordinator.subscribed and self.fetcher.states:
            raise KafkaClientError("subscribe() and assign() cannot be mixed: "
                                   "assign([]) first")
        coordinator.subscribe(topics, pattern, listener)

    def unsubscribe(self) -> None:
        """Leave the group (in the background) and stop consuming."""
        if self._coordinator is not None:
            self._coordinator.unsubscribe()

    def subscription(self) -> set[str]:
        return set() if self._coordinator is None else self._coordinator.subscription()

    async def commit(self, offsets: dict[tuple[str, int], int | OffsetAndMetadata]
                     | None = None) -> None:
        """Commit these offsets (the next record to read) for the group; by default the
        current position of every assigned partition."""
        await self._ready()
        await self.coordinator.commit(offsets)

    async def committed(self, partitions: Iterable[tuple[str, int]]
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        await self._ready()
        return await self.coordinator.committed(partitions)

    # -- assignment and positions

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Consume exactly these partitions; new ones start at auto_offset_reset."""
        if self._closed:
            raise KafkaClientError("consumer is closed")
        if self._coordinator is not None and self._coordinator.subscribed:
            raise KafkaClientError("assign() and subscribe() cannot be mixed: "
                                   "unsubscribe() first")
        self.fetcher.assign(TopicPartition(t, p) for t, p in partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self.fetcher.states)

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        """The next record handed out for ``tp`` is the one at ``offset``."""
        if offset < 0:
            raise ValueError(f"offset must not be negative, not {offset}")
        self.fetcher.seek(TopicPartition(*tp), offset)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Move to the log start offset (all assigned partitions when none is given)."""
        for tp in partitions or tuple(self.fetcher.states):
            self.fetcher.request_reset(TopicPartition(*tp), EARLIEST)

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Move past the last record (read_committed: the last stable offset)."""
        for tp in partitions or tuple(self.fetcher.states):
            self.fetcher.request_reset(TopicPartition(*tp), LATEST)

    async def seek_to_timestamp(self, timestamps: dict[tuple[str, int], int]) -> None:
        """Move each partition to its first record with a timestamp >= the given one
        (to the end when there is none)."""
        found = await self.offsets_for_times(timestamps)
        ends = await self.end_offsets([tp for tp, hit in found.items() if hit is None])
        for tp, hit in found.items():
            self.seek(tp, hit.offset if hit is not None else ends[tp])

    async def position(self, tp: tuple[str, int], timeout_ms: int | None = None) -> int:
        """The offset of the next record to hand out (waits for a pending reset)."""
        fetcher = await self._ready()
        return await fetcher.position(
            TopicPartition(*tp), None if timeout_ms is None else timeout_ms / 1000)

    def highwater(self, tp: tuple[str, int]) -> int | None:
        """The high watermark as of the last fetch (None before one)."""
        state = self.fetcher.states.get(TopicPartition(*tp))
        return None if state is None or state.high_watermark < 0 else state.high_watermark

    def last_stable_offset(self, tp: tuple[str, int]) -> int | None:
        state = self.fetcher.states.get(TopicPartition(*tp))
        return (None if state is None or state.last_stable_offset < 0
                else state.last_stable_offset)

    async def offsets_for_times(
        self, timestamps: dict[tuple[str, int], int], timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is >= the given time (ms),
        None when no record is that recent."""
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError(f"timestamps must not be negative, not {ts}")
        found = await self._list_offsets(
            {TopicPartition(*tp): ts for tp, ts in timestamps.items()}, timeout_ms)
        return {
            tp: None if offset < 0 else OffsetAndTimestamp(
                offset, ts, None if epoch < 0 else epoch)
            for tp, (offset, ts, epoch) in found.items()
        }

    async def beginning_offsets(self, partitions: Iterable[tuple[str, int]],
                                timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The log start offset of each partition."""
        found = await self._list_offsets(
            {TopicPartition(*tp): EARLIEST for tp in partitions}, timeout_ms)
        return {tp: offset for tp, (offset, _ts, _e) in found.items()}

    async def end_offsets(self, partitions: Iterable[tuple[str, int]],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The end of each partition: the high watermark (read_committed: the LSO)."""
        found = await self._list_offsets(
            {TopicPartition(*tp): LATEST for tp in partitions}, timeout_ms)
        return {tp: offset for tp, (offset, _ts, _e) in found.items()}

    async def _list_offsets(self, wanted: dict[TopicPartition, int], timeout_ms: int | None
                            ) -> dict[TopicPartition, tuple[int, int, int]]:
        fetcher = await self._ready()
        if not wanted:
            return {}
        missing = [tp for tp in wanted
                   if self._client.cluster.leader_for(tp.topic, tp.partition) is None]
        if missing:
            with contextlib.suppress(KafkaClientError):
                await self._client.refresh_metadata(sorted({tp.topic for tp in missing}))
        return await fetcher.list_offsets(
            wanted, timeout=None if timeout_ms is None else timeout_ms / 1000)

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop fetching and handing out records of these partitions until resumed."""
        for tp in partitions:
            self.fetcher.pause(TopicPartition(*tp))

    def resume(self, *partitions: tuple[str, int]) -> None:
        for tp in partitions:
            self.fetcher.resume(TopicPartition(*tp))

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.fetcher.states.items() if s.paused}

    # -- records

    async def getmany(
        self, *partitions: tuple[str, int], timeout_ms: int = 0, max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched so far, waiting up to ``timeout_ms`` for some when none are.

        Limited to ``partitions`` when given, and to ``max_records`` in all. Raises the
        first pending error (OFFSET_OUT_OF_RANGE with auto_offset_reset "none", corrupt
        data, a deserializer's failure) when it is reached.
        """
        fetcher = await self._ready()
        if max_records is not None and max_records < 1:
            raise ValueError(f"max_records must be positive, not {max_records}")
        if self._group_args is not None:
            await self.coordinator.poll(max(timeout_ms, 0) / 1000)
        wanted = [TopicPartition(*tp) for tp in partitions] or None
        self._check_positions(fetcher, wanted)
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        while True:
            records = fetcher.drain(wanted, max_records)
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            await fetcher.wait_for_data(remaining)

    async def getone(self, *partitions: tuple[str, int]) -> ConsumerRecord:
        """The next record, waiting as long as it takes."""
        while True:
            batch = await self.getmany(*partitions, timeout_ms=1000, max_records=1)
            for records in batch.values():
                return records[0]

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        if self._closed:
            raise StopAsyncIteration
        return await self.getone()

    @staticmethod
    def _check_positions(fetcher: Fetcher, wanted: list[TopicPartition] | None) -> None:
        for tp in wanted or fetcher.states:
            state = fetcher.states.get(tp)
            if state is None:
                raise KafkaClientError(f"partition {tp.topic}-{tp.partition} is not assigned")
            if state.position is None and state.reset is None:
                raise NoOffsetForPartitionError(
                    f"no offset for {tp.topic}-{tp.partition} and auto_offset_reset is none; "
                    "seek first")



# --- reading a topic from a start position (what `klog consume` and `perf consume` do) ---


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start: ``kind`` is "beginning", "end", "offset" (value = the offset),
    "timestamp" (value = ms) or "from_end" (value = records before the end)."""

    kind: str
    value: int = 0


def parse_offset_spec(text: str) -> OffsetSpec:
    """``beginning``, ``end``, ``<offset>``, ``@<timestamp ms>`` or ``-N`` (N before end)."""
    spec = text.strip().lower()
    if spec in ("beginning", "earliest", "start", "first", "smallest"):
        return OffsetSpec("beginning")
    if spec in ("end", "latest", "last", "largest"):
        return OffsetSpec("end")
    try:
        if spec.startswith("@"):
            value = int(spec[1:])
            if value < 0:
                raise ValueError
            return OffsetSpec("timestamp", value)
        value = int(spec)
    except ValueError:
        raise ValueError(
            f"offset must be beginning, end, <offset>, @<timestamp ms> or -N, not {text!r}"
        ) from None
    if spec.startswith("-"):
        return OffsetSpec("from_end", -value)
    return OffsetSpec("offset", value)


async def seek_to_spec(consumer: Consumer, partitions: Sequence[TopicPartition],
                       spec: OffsetSpec) -> dict[TopicPartition, int]:
    """Position each partition where ``spec`` says, clamped to [log start, end];
    returns the start positions."""
    starts = await consumer.beginning_offsets(partitions)
    ends = await consumer.end_offsets(partitions)
    positions: dict[TopicPartition, int] = {}
    if spec.kind == "timestamp":
        found = await consumer.offsets_for_times({tp: spec.value for tp in partitions})
        for tp in partitions:
            hit = found.get(tp)
            positions[tp] = ends[tp] if hit is None else hit.offset
    else:
        for tp in partitions:
            if spec.kind == "beginning":
                positions[tp] = starts[tp]
            elif spec.kind == "end":
                positions[tp] = ends[tp]
            elif spec.kind == "from_end":
                positions[tp] = ends[tp] - spec.value
            else:
                positions[tp] = spec.value
    for tp in partitions:
        positions[tp] = max(starts[tp], min(positions[tp], ends[tp]))
        consumer.seek(tp, positions[tp])
    return positions


async def read_records(
    consumer: Consumer,
    partitions: Sequence[TopicPartition],
    *,
    count: int | None = None,
    exit_at_end: bool = False,
    idle_timeout: float | None = None,
    max_records: int = 10_000,
) -> AsyncIterator[list[ConsumerRecord]]:
    """Yield lists of records from the consumer's positions for ``partitions``.

    Stops after ``count`` records in all, when ``exit_at_end`` and every partition has
    reached the end it had when reading started, or when no record came for
    ``idle_timeout`` seconds. Records of one partition come in offset order.
    """
    ends: dict[TopicPartition, int] = {}
    if exit_at_end:
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            if await consumer.position(tp) >= ends[tp]:
                ends.pop(tp)
                consumer.pause(tp)
        if not ends:
            return
    remaining = count
    last_record = time.monotonic()
    while remaining is None or remaining > 0:
        wait_ms = 500 if idle_timeout is None else max(
            0, min(500, int((last_record + idle_timeout - time.monotonic()) * 1000)))
        limit = max_records if remaining is None else min(max_records, remaining)
        batch = await consumer.getmany(*partitions, timeout_ms=wait_ms, max_records=limit)
        now = time.monotonic()
        if not batch:
            if idle_timeout is not None and now - last_record >= idle_timeout:
                return
            if exit_at_end:
                # The last records before the end may be control batches (transaction
                # markers) or aborted data, which hand out nothing but move the position.
                for tp in [tp for tp, end in ends.items()
                           if await consumer.position(tp) >= end]:
                    del ends[tp]
                    consumer.pause(tp)
                if not ends:
                    return
            continue
        last_record = now
        for tp, records in batch.items():
            if exit_at_end and tp in ends:
                end = ends[tp]
                if records[-1].offset + 1 >= end:
                    records = [r for r in records if r.offset < end]
                    del ends[tp]
                    consumer.pause(tp)
            if remaining is not None:
                records = records[:remaining]
                remaining -= len(records)
            if records:
                yield records
            if remaining is not None and remaining <= 0:
                return
        if exit_at_end and not ends:
            return


async def measure_consume(
    bootstrap_servers: str | Sequence[str],
    topic: str,
    messages: int,
    *,
    partitions: Sequence[int] | None = None,
    idle_timeout: float = 10.0,
    **consumer_options: Any,  # Any: Consumer's keyword arguments, passed through
) -> dict[str, float]:
    """Read ``messages`` records of ``topic`` from the beginning as fast as possible
    (kafka-consumer-perf-test): records, bytes (keys + values), seconds, MB/s, records/s.

    The clock starts once positions are known (after metadata and ListOffsets), so it
    measures fetching and decoding. Stops early when no record came for ``idle_timeout``
    seconds. Raises KafkaClientError for an unknown topic or partition.
    """
    options: dict[str, Any] = {"client_id": "klog-perf-consume", **consumer_options}
    async with Consumer(bootstrap_servers, **options) as consumer:
        known = await consumer.partitions_for_topic(topic)
        if known is None:
            raise KafkaClientError(f"topic {topic!r} does not exist",
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        wanted = list(partitions) if partitions else known
        missing = sorted(set(wanted) - set(known))
        if missing:
            raise KafkaClientError(f"topic {topic!r} has no partition {missing[0]}",
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        tps = [TopicPartition(topic, p) for p in wanted]
        consumer.assign(tps)
        await seek_to_spec(consumer, tps, OffsetSpec("beginning"))
        records = size = 0
        started = time.monotonic()
        last = started
        async for batch in read_records(consumer, tps, count=messages,
                                        idle_timeout=idle_timeout):
            records += len(batch)
            for r in batch:
                size += max(r.serialized_key_size, 0) + max(r.serialized_value_size, 0)
            last = time.monotonic()
        elapsed = max(last - started, 1e-9)
    mb = size / (1024 * 1024)
    return {
        "records": records,
        "bytes": size,
        "seconds": round(elapsed, 6),
        "mb": round(mb, 4),
        "mb_per_sec": round(mb / elapsed, 4),
        "records_per_sec": round(records / elapsed, 2),
    }


#: Kafka's consumer property names -> Consumer keyword and converter.
CONSUMER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "client.id": ("client_id", str),
    "group.id": ("group_id", str),
    "group.instance.id": ("group_instance_id", str),
    "auto.offset.reset": ("auto_offset_reset", str),
    "enable.auto.commit": ("enable_auto_commit", boolean),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", int),
    "session.timeout.ms": ("session_timeout_ms", int),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", int),
    "max.poll.interval.ms": ("max_poll_interval_ms", int),
    "partition.assignment.strategy": (
        "partition_assignment_strategy",
        lambda v: tuple(s.strip() for s in v.split(",") if s.strip())),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "isolation.level": ("isolation_level", str),
    "check.crcs": ("check_crcs", boolean),
    "request.timeout.ms": ("request_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
    "client.rack": ("client_rack", str),
}


def consumer_config(properties: Mapping[str, str]) -> dict[str, Any]:
    """Consumer keywords from Kafka property names (``group.id`` -> ``group_id``).

    ValueError names the property that is unknown or has a bad value.
    """
    return keywords(properties, CONSUMER_PROPERTIES, "consumer", security=True)
