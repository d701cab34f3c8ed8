"""Reading a live cluster with klog's client: planning on the driver, ranges in tasks.

This module owns the live side of the "klog" data source (option
``kafka.bootstrap.servers``). Planning asks the cluster for its topics and partitions
(Metadata), each partition's earliest and latest offsets (ListOffsets; for read_committed
"latest" is the last stable offset, as the broker answers it) and, with the timestamp
options, the offsets of timestamps. A task reads one [start, end) range with a
``klog.client.Consumer`` assigned to that one partition: Fetch requests, the client's own
decoding (every format and codec, control batches dropped, aborted transactions skipped
under read_committed), stopping once its position reaches ``end``.

Each call runs its own event loop (``asyncio.run``): Spark calls us from plain threads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pyarrow as pa

from klog.client.consumer import Consumer
from klog.spark.arrow import DEFAULT_BATCH_ROWS, ColumnBuilder
from klog.spark.options import OffsetRange, OptionsError, PartitionOffsets, SourceOptions

# A task that sees no progress for this long fails rather than hanging a Spark job.
STALL_TIMEOUT_S = 60.0


class LiveError(Exception):
    """The cluster cannot serve what was asked (unknown topic, no progress)."""


def _isolation(read_committed: bool) -> str:
    return "read_committed" if read_committed else "read_uncommitted"


async def _plan(options: SourceOptions) -> list[PartitionOffsets]:
    async with Consumer(
        options.bootstrap_servers or "", isolation_level=_isolation(options.read_committed),
        client_id="klog-spark-planner",
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
        for tp in tps:
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


async def _read(
    servers: str, r: OffsetRange, include_headers: bool, read_committed: bool,
    batch_rows: int, stats: dict[str, int],
) -> AsyncIterator[pa.RecordBatch]:
    builder = ColumnBuilder(r.topic, r.partition, include_headers)
    tp = (r.topic, r.partition)
    rows = 0
    first = last = -1
    async with Consumer(
        servers, isolation_level=_isolation(read_committed), auto_offset_reset="none",
        client_id="klog-spark-reader", max_partition_fetch_bytes=4 * 1024 * 1024,
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        deadline = time.monotonic() + STALL_TIMEOUT_S
        while await consumer.position(tp) < r.end:
            batch = await consumer.getmany(tp, timeout_ms=500)
            if not batch:
                if time.monotonic() > deadline:
                    raise LiveError(
                        f"{r.topic}-{r.partition}: no progress towards offset {r.end} for "
                        f"{STALL_TIMEOUT_S:.0f} s")
                continue
            deadline = time.monotonic() + STALL_TIMEOUT_S
            for records in batch.values():
                for rec in records:
                    if rec.offset >= r.end:
                        break
                    key, value = rec.key, rec.value
                    builder.keys.append(key)
                    builder.values.append(value)
                    builder.offsets.append(rec.offset)
                    builder.timestamps.append(rec.timestamp)
                    builder.timestamp_types.append(rec.timestamp_type)
                    if include_headers:
                        builder.headers.append(rec.headers)
            if len(builder) >= batch_rows:
                rows += len(builder)
                first = builder.offsets[0] if first < 0 else first
                last = builder.offsets[-1]
                yield builder.flush()
    if len(builder):
        rows += len(builder)
        first = builder.offsets[0] if first < 0 else first
        last = builder.offsets[-1]
        yield builder.flush()
    stats.update(rows=rows, bytes=builder.nbytes, first_offset=first, last_offset=last)


def read_range(
    servers: str, r: OffsetRange, *, include_headers: bool, read_committed: bool,
    batch_rows: int = DEFAULT_BATCH_ROWS, stats: dict[str, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``r`` read from the cluster, as Arrow record batches.

    The event loop is driven one batch at a time, so memory holds one batch, not the range.
    """
    loop = asyncio.new_event_loop()
    rows = _read(servers, r, include_headers, read_committed, batch_rows,
                 stats if stats is not None else {})
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
