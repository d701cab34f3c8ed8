"""DescribeLogDirs: what each of this broker's log dirs holds (Kafka's
ReplicaManager.describeLogDirs), read from the log manager: the partitions' logs and
future logs (a move between dirs in progress) with their sizes and lags, and each file
system's total and usable bytes; a failed dir answers KAFKA_STORAGE_ERROR alone.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass

from klog.protocol.errors import ErrorCode
from klog.storage.log_manager import LogManager

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class ReplicaInfo:
    """One partition's log in a log dir, as DescribeLogDirs reports it."""

    partition: int
    size: int
    # Log end behind the high watermark; -1 for a log no replica serves. A future log
    # (a move in progress): how far it is behind the partition's log.
    offset_lag: int
    is_future: bool = False


@dataclass(slots=True)
class LogDirInfo:
    log_dir: str
    error_code: int = 0
    total_bytes: int = -1
    usable_bytes: int = -1
    topics: dict[str, list[ReplicaInfo]] | None = None


def describe_log_dirs(lm: LogManager, hosted: Collection[TopicPartition],
                      wanted: set[TopicPartition] | None) -> list[LogDirInfo]:
    """Per log dir, the partitions it holds (those in ``wanted``, or all) with their
    sizes (``hosted``: the partitions a replica serves here), and the file system's total
    and usable bytes. As Kafka: a requested topic listed in a dir without any of the
    requested partitions still appears, with none. Blocking (statvfs, directory sizes):
    a worker thread."""
    by_dir: dict[str, dict[str, list[ReplicaInfo]]] = {}
    for tp, plog in sorted(lm.all_logs().items()):
        held_in = lm.log_dir_of(*tp)
        if held_in is None:
            continue
        parts = by_dir.setdefault(os.path.abspath(held_in), {}).setdefault(tp[0], [])
        if wanted is not None and tp not in wanted:
            continue
        lag = max(plog.high_watermark - plog.log_end_offset, 0) if tp in hosted else -1
        parts.append(ReplicaInfo(tp[1], plog.size, lag))
    for tp, future in sorted(lm.all_future_logs().items()):
        held_in = lm.future_log_dir_of(*tp)
        current = lm.get_log(*tp)
        if held_in is None:
            continue
        parts = by_dir.setdefault(os.path.abspath(held_in), {}).setdefault(tp[0], [])
        if wanted is not None and tp not in wanted:
            continue
        # Kafka's getLogEndOffsetLag of a future replica: the log's end minus its own.
        lag = current.log_end_offset - future.log_end_offset if current is not None else -1
        parts.append(ReplicaInfo(tp[1], future.size, lag, is_future=True))
    results = []
    offline = {os.path.abspath(d) for d in lm.offline_dirs}
    for log_dir in dict.fromkeys(os.path.abspath(d) for d in lm.log_dirs):
        if log_dir in offline:  # as Kafka: the dir, with the error and nothing else
            results.append(LogDirInfo(log_dir, int(ErrorCode.KAFKA_STORAGE_ERROR)))
            continue
        try:
            st = os.statvfs(log_dir)
        except OSError:
            results.append(LogDirInfo(log_dir, int(ErrorCode.KAFKA_STORAGE_ERROR)))
            continue
        topics = by_dir.get(log_dir, {})
        if wanted is not None:
            topics = {t: p for t, p in topics.items() if any(w[0] == t for w in wanted)}
        results.append(LogDirInfo(log_dir, 0, st.f_blocks * st.f_frsize,
                                  st.f_bavail * st.f_frsize, topics))
    return results
