"""Planning a read: which Spark tasks read which offsets, offline or live.

This module owns the split of a query into ``ReadTask`` values (picklable; one per Spark
input partition). Offline, a partition's [start, end) is cut at segment boundaries (one task
per segment) and a segment larger than ``SPLIT_BYTES`` is cut again into offset ranges of
about that many bytes; live, each topic-partition is one range. ``minPartitions`` then
splits ranges further in proportion to their sizes. Reading a task is ``read_task``.
No pyspark here: the export job plans with the same code the data source runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from klog.spark import live, offline
from klog.spark.options import (
    OffsetRange,
    OptionsError,
    PartitionOffsets,
    SourceOptions,
    split_ranges,
)

# One Spark task reads about this much of a big segment (Spark's default split size).
SPLIT_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One Spark input partition: a range, where to read it, and how."""

    index: int
    range: OffsetRange
    # offline: the partition's files and, for read_committed, its aborted transactions
    files: offline.PartitionFiles | None
    aborted: tuple[tuple[int, int, int], ...] | None
    # live
    bootstrap_servers: str | None
    include_headers: bool
    read_committed: bool
    stats_dir: str | None
    #: live: client security settings (Kafka's names; each task builds its own context)
    security: dict[str, str] = field(default_factory=dict)


def partition_offsets(options: SourceOptions) -> tuple[
    list[PartitionOffsets], dict[tuple[str, int], offline.PartitionFiles],
    dict[tuple[str, int], offline.TxnState],
]:
    """The offsets of every selected topic-partition (and, offline, its files and, for
    read_committed, its transaction state)."""
    if not options.offline:
        return live.plan(options), {}, {}
    parts = offline.list_partitions(options.path or "")
    available = sorted({topic for topic, _ in parts})
    # As Kafka's consumer (exclude.internal.topics=true), a pattern never picks internal
    # topics (__consumer_offsets, __transaction_state); naming one with subscribe does.
    topics = options.select_topics(
        [t for t in available if not t.startswith("__")] if options.subscribe_pattern
        else available)
    missing = [t for t in topics if t not in available]
    if missing:
        raise OptionsError(f"no partition of topic(s) {', '.join(missing)} in {options.path}")
    partitions_of: dict[str, list[int]] = {}
    for topic, partition in parts:
        if topic in topics:
            partitions_of.setdefault(topic, []).append(partition)
    found: list[PartitionOffsets] = []
    txns: dict[tuple[str, int], offline.TxnState] = {}
    for tp in options.select_partitions(partitions_of):
        files = parts[tp]
        earliest = offline.log_start_offset(files)
        latest = offline.log_end_offset(files)
        if options.read_committed:
            txns[tp] = offline.transaction_state(files, latest)
            latest = txns[tp].last_stable_offset
        latest = max(latest, earliest)
        start_ts = end_ts = None
        if options.starting_timestamp is not None:
            start_ts = offline.offset_for_timestamp(files, options.starting_timestamp)
        if options.ending_timestamp is not None:
            end_ts = offline.offset_for_timestamp(files, options.ending_timestamp)
        found.append(PartitionOffsets(tp[0], tp[1], earliest, latest, start_ts, end_ts))
    return found, parts, txns


def _segment_ranges(r: OffsetRange, files: offline.PartitionFiles) -> list[OffsetRange]:
    bases = files.segment_bases
    out: list[OffsetRange] = []
    for i, base in enumerate(bases):
        seg_end = bases[i + 1] if i + 1 < len(bases) else r.end
        lo, hi = max(r.start, base), min(r.end, seg_end)
        if lo >= hi:
            continue
        try:
            size = os.path.getsize(files.log_path(base))
        except OSError:
            size = 0
        span = max(seg_end - base, 1)
        # Bytes of this range, assuming records spread evenly over the segment's offsets.
        share = size * (hi - lo) // span
        parts = max(1, -(-share // SPLIT_BYTES))
        step = -(-(hi - lo) // parts)
        for s in range(lo, hi, step):
            out.append(OffsetRange(r.topic, r.partition, s, min(s + step, hi)))
    return out


def plan_tasks(options: SourceOptions) -> list[ReadTask]:
    offsets, parts, txns = partition_offsets(options)
    ranges: list[OffsetRange] = []
    for po in offsets:
        r = po.offset_range(options)
        if r.size == 0:
            continue
        tp = (r.topic, r.partition)
        ranges.extend(_segment_ranges(r, parts[tp]) if options.offline else [r])
    ranges = split_ranges(ranges, options.min_partitions)
    return [
        ReadTask(
            index=i,
            range=r,
            files=parts.get((r.topic, r.partition)),
            aborted=txns[(r.topic, r.partition)].aborted if options.read_committed and
            options.offline else None,
            bootstrap_servers=options.bootstrap_servers,
            include_headers=options.include_headers,
            read_committed=options.read_committed,
            stats_dir=options.stats_dir,
            security=options.security,
        )
        for i, r in enumerate(ranges)
    ]


def read_task(task: ReadTask) -> Iterator[pa.RecordBatch]:
    """The rows of one task; with a stats directory, also ``<stats_dir>/<index>.json``."""
    stats: dict[str, int] = {}
    r = task.range
    if task.files is not None:
        batches = offline.read_range(
            task.files, r.start, r.end, include_headers=task.include_headers,
            aborted=task.aborted if task.read_committed else None, stats=stats,
        )
    else:
        batches = live.read_range(
            task.bootstrap_servers or "", r, include_headers=task.include_headers,
            read_committed=task.read_committed, stats=stats, security=task.security,
        )
    yield from batches
    if task.stats_dir is not None:
        record = {"index": task.index, **asdict(r), **stats}
        path = Path(task.stats_dir) / f"{task.index}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)  # a retried task rewrites the same file
