"""Reading a live cluster with klog's client: planning on the driver, ranges in tasks.

This module owns the live side of the "klog" data source (option
``kafka.bootstrap.servers``). Planning asks the cluster for its topics and partitions
(Metadata), each partition's earliest and latest offsets (ListOffsets; for read_committed
"latest" is the last stable offset, as the broker answers it) and, with the timestamp
options, the offsets of timestamps (all through ``klog.client.Consumer``). A task reads
one [start, end) range with Fetch requests of its own over klog's ``KafkaClient`` (version
negotiation, leader lookup) and decodes the record bytes with the offline reader's
``RangeDecoder``: every format and codec, control batches dropped, aborted transactions
(from the response) skipped under read_committed, no per-record objects.

Planning runs ``asyncio.run``; a task drives its own event loop one Arrow batch at a time
(Spark calls us from plain threads and iterates lazily).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Iterator, Mapping
from typing import Any

import pyarrow as pa

from klog.client.consumer import Consumer
from klog.client.errors import INVALID_METADATA, KafkaClientError, error_for
from klog.client.fetcher import TopicPartition
from klog.client.network import KafkaClient
from klog.client.security import ClientSecurity, SecurityConfigError
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import iter_batch_headers
from klog.spark.arrow import DEFAULT_BATCH_ROWS, ColumnBuilder
from klog.spark.offline import MAX_BATCH_SIZE, RangeDecoder, _RowCounter
from klog.spark.options import OffsetRange, OptionsError, PartitionOffsets, SourceOptions

# A task that sees no progress for this long fails rather than hanging a Spark job.
STALL_TIMEOUT_S = 60.0
FETCH = 1
#: The last Fetch version naming topics by name (v13+: by topic id).
FETCH_BY_NAME_MAX = 12
PARTITION_FETCH_BYTES = 8 * 1024 * 1024
REQUEST_TIMEOUT_MS = 30_000
RETRY_BACKOFF_S = 0.1


class LiveError(Exception):
    """The cluster cannot serve what was asked (unknown topic, no progress)."""


def _isolation(read_committed: bool) -> str:
    return "read_committed" if read_committed else "read_uncommitted"


async def _plan(options: SourceOptions) -> list[PartitionOffsets]:
    async with Consumer(
        options.bootstrap_servers or "", isolation_level=_isolation(options.read_committed),
        client_id="klog-spark-planner", security=client_security(options.security),
    ) as consumer:
        client = consumer.client
        if options.subscribe_pattern is not None:
            await client.refresh_metadata(None)
            available = sorted(t for t in client.cluster.topics if not t.startswith("__"))
        else:
            available = []
        topics = options.select_topics(available)
        partitions_of: dict[str, list[int]] = {}
        for topic in topics:
            partitions = await consumer.partitions_for_topic(topic)
            if partitions is None:
                raise LiveError(f"topic {topic} does not exist on {options.bootstrap_servers}")
            partitions_of[topic] = sorted(partitions)
        tps = options.select_partitions(partitions_of)
        if not tps:
            return []
        earliest = await consumer.beginning_offsets(tps)
        latest = await consumer.end_offsets(tps)
        by_start: dict[Any, Any] = {}
        by_end: dict[Any, Any] = {}
        if options.starting_timestamp is not None:
            by_start = await consumer.offsets_for_times(
                {tp: options.starting_timestamp for tp in tps})
        if options.ending_timestamp is not None:
            by_end = await consumer.offsets_for_times(
                {tp: options.ending_timestamp for tp in tps})
        out = []
        for topic, partition in tps:
            tp = TopicPartition(topic, partition)  # the consumer's answers are keyed so
            lo, hi = earliest[tp], latest[tp]
            s = by_start.get(tp)
            e = by_end.get(tp)
            out.append(PartitionOffsets(tp[0], tp[1], lo, hi,
                                        None if s is None else s.offset,
                                        None if e is None else e.offset))
        return out


def plan(options: SourceOptions) -> list[PartitionOffsets]:
    """The offsets of every topic-partition the options select."""
    try:
        return asyncio.run(_plan(options))
    except OptionsError:
        raise
    except Exception as exc:
        raise LiveError(f"cannot plan a read of {options.bootstrap_servers}: {exc}") from exc


def client_security(settings: Mapping[str, str]) -> ClientSecurity | None:
    """The client security the ``kafka.*`` options ask for (None: PLAINTEXT); LiveError
    names a setting that cannot be used."""
    if not settings:
        return None
    try:
        return ClientSecurity.from_properties(settings)
    except SecurityConfigError as exc:
        raise LiveError(f"kafka.* security options: {exc}") from None


async def _read(
    servers: str, r: OffsetRange, include_headers: bool, read_committed: bool,
    batch_rows: int, stats: dict[str, int], security: Mapping[str, str],
) -> AsyncGenerator[pa.RecordBatch, None]:
    # Fetch requests by hand (not the Consumer): the partition's record bytes go straight
    # into column lists through the offline reader's RangeDecoder, with no per-record
    # objects on the way -- the same decoding, whichever side the bytes came from.
    builder = ColumnBuilder(r.topic, r.partition, include_headers)
    decoder = RangeDecoder(builder, r.start, r.end)
    counter = _RowCounter()
    max_bytes = PARTITION_FETCH_BYTES
    client = KafkaClient(servers, client_id="klog-spark-reader",
                         security=client_security(security))
    await client.start()
    try:
        offset = r.start
        deadline = time.monotonic() + STALL_TIMEOUT_S
        last_error: Exception | None = None
        while offset < r.end and not decoder.done:
            if time.monotonic() > deadline:
                why = f" (last error: {last_error})" if last_error else ""
                raise LiveError(f"{r.topic}-{r.partition}: no progress at offset {offset} for "
                                f"{STALL_TIMEOUT_S:.0f} s{why}")
            try:
                leader = await client.leader_for(r.topic, r.partition)
                part = await _fetch(client, leader, r, offset, max_bytes, read_committed)
            except KafkaClientError as exc:
                # Leaders move and connections drop: retried until the stall timeout.
                last_error = exc
                client.request_metadata_refresh()
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            code = int(part.error_code)
            if code in INVALID_METADATA:
                client.request_metadata_refresh()
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if code != ErrorCode.NONE:
                raise LiveError(f"{r.topic}-{r.partition} at offset {offset}: "
                                f"{error_for(code, 'fetch')}")
            data = part.records or b""
            if read_committed:
                decoder.set_aborted([(int(a.producer_id), int(a.first_offset))
                                     for a in (part.aborted_transactions or ())])
            whole = False
            for header in iter_batch_headers(data, max_batch_size=MAX_BATCH_SIZE):
                whole = True
                decoder.entry(header, data)
                if decoder.done:
                    break
            if data and not whole:
                # The first batch is bigger than we asked for (brokers before Fetch v3).
                max_bytes = min(max_bytes * 4, MAX_BATCH_SIZE)
                continue
            if not data:
                # Nothing past ``offset`` yet; past the end of what is stable, wait.
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            offset = max(offset, decoder.next_offset)
            deadline = time.monotonic() + STALL_TIMEOUT_S
            while len(builder) >= batch_rows:
                yield counter.flush(builder)
        if len(builder):
            yield counter.flush(builder)
        stats.update(counter.stats(builder))
    finally:
        await client.close()


async def _fetch(
    client: KafkaClient, leader: int, r: OffsetRange, offset: int, max_bytes: int,
    read_committed: bool,
) -> Any:
    values = {
        "replica_id": -1,
        "max_wait": 500,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 1 if read_committed else 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": r.topic, "partitions": [{
            "partition": r.partition,
            "fetch_offset": offset,
            "partition_max_bytes": max_bytes,
            "current_leader_epoch": -1,
            "last_fetched_epoch": -1,
            "log_start_offset": -1,
        }]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    # Fetch v13+ names topics by id; one partition read by name needs nothing of them, so
    # the version stops at v12 (which every broker that has v13+ also serves).
    version = client.api_version(leader, FETCH, max_version=FETCH_BY_NAME_MAX)
    response = await client.send(leader, FETCH, values, version=version,
                                 timeout_ms=REQUEST_TIMEOUT_MS)
    top = int(getattr(response, "error_code", 0) or 0)
    if top:
        raise error_for(top, "fetch")
    for topic in response.responses:
        for part in topic.partitions:
            if int(part.partition_index) == r.partition:
                return part
    raise KafkaClientError(f"the fetch response has no {r.topic}-{r.partition}")


def read_range(
    servers: str, r: OffsetRange, *, include_headers: bool, read_committed: bool,
    batch_rows: int = DEFAULT_BATCH_ROWS, stats: dict[str, int] | None = None,
    security: Mapping[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``r`` read from the cluster, as Arrow record batches.

    The event loop is driven one batch at a time, so memory holds one batch, not the range.
    """
    loop = asyncio.new_event_loop()
    rows = _read(servers, r, include_headers, read_committed, batch_rows,
                 stats if stats is not None else {}, security or {})
    try:
        while True:
            try:
                batch = loop.run_until_complete(rows.__anext__())
            except StopAsyncIteration:
                return
            yield batch
    finally:
        loop.run_until_complete(rows.aclose())
        loop.close()
