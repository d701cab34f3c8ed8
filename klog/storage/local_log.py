"""LocalLog: a partition's segments in its directory, as Kafka's LocalLog.

It owns the directory ``<topic>-<partition>`` and the names partition directories take
(``-delete``, ``-future`` and ``-stray`` forms, Kafka's LocalLog companion), the segments
(sorted by base offset, found with bisect), the log end offset and recovery point, the
segments scheduled for deletion (renamed ``.deleted``, removed after
file.delete.delay.ms), and flushing (the flush.messages / flush.ms policy, fsync of the
directory after a segment was created). PartitionLog (log.py) builds on it with the
log start offset, the high watermark, the producer state, the leader epoch cache,
appends, reads, truncation and retention.

Locking: the log's one re-entrant lock (``_lock``); public methods take it, the
``_``-prefixed bookkeeping expects it held.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from klog.storage.checkpoints import fsync_dir
from klog.storage.config import LogConfig
from klog.storage.files import DELETED_FILE_SUFFIX, INDEX_FILE_SUFFIXES, filename_prefix_from_offset
from klog.storage.segment import LogSegment
from klog.storage.values import LogOffsetMetadata

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

P = ParamSpec("P")
T = TypeVar("T")
L = TypeVar("L", bound="LocalLog")


# -- directory names ------------------------------------------------------------------------

_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SPECIAL_DIR_RE = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)\.(?P<uid>[0-9a-fA-F]{32})(?P<kind>-delete|-future|-stray)$"
)


@dataclass(frozen=True, slots=True)
class PartitionDirName:
    """What a partition directory's name says: topic, partition and its state."""

    topic: str
    partition: int
    kind: str = ""  # "", "delete", "future" or "stray"


def log_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _special_dir_name(topic: str, partition: int, suffix: str) -> str:
    # Kafka: <topic>-<partition>.<uuid without dashes><suffix>
    return f"{topic}-{partition}.{uuid.uuid4().hex}{suffix}"


def log_delete_dir_name(topic: str, partition: int) -> str:
    return _special_dir_name(topic, partition, DELETE_DIR_SUFFIX)


def log_future_dir_name(topic: str, partition: int) -> str:
    return _special_dir_name(topic, partition, FUTURE_DIR_SUFFIX)


def parse_partition_dir_name(name: str) -> PartitionDirName:
    """Parse ``<topic>-<partition>`` (or its ``.<uuid>-delete`` / ``-future`` forms)."""
    special = _SPECIAL_DIR_RE.match(name)
    if special:
        return PartitionDirName(
            special["topic"], int(special["partition"]), special["kind"].lstrip("-")
        )
    plain = _DIR_RE.match(name)
    if plain is None or not plain["topic"]:
        raise ValueError(
            f"found directory {name!r}, which is not in the form of topic-partition or "
            "topic-partition.uniqueId-delete (if marked for deletion)"
        )
    return PartitionDirName(plain["topic"], int(plain["partition"]))


def locked(
    method: Callable[Concatenate[L, P], T],
) -> Callable[Concatenate[L, P], T]:
    """``method`` holding the log's lock for its duration."""
    @functools.wraps(method)
    def wrapper(self: L, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class LocalLog:
    """See the module docstring."""

    # The attributes klog/storage/_fastread.c reads, as slots (it reads them at fixed
    # offsets, found through PartitionLog); everything else lives in the instance dict.
    # ``_log_start_offset`` is PartitionLog's, declared here with the others.
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_base_offsets",
        "_lock",
        "_log_end_offset",
        "_log_start_offset",
        "_segments",
    )

    def __init__(self, directory: Path | str, config: LogConfig | None,
                 clock: Callable[[], int], recovery_point: int) -> None:
        self.dir = Path(directory)
        self.config = config or LogConfig()
        self.clock = clock
        self._lock = threading.RLock()
        name = parse_partition_dir_name(self.dir.name)
        self.topic, self.partition = name.topic, name.partition
        self.dir.mkdir(parents=True, exist_ok=True)
        self._base_offsets: list[int] = []
        self._segments: dict[int, LogSegment] = {}
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._recovery_point = recovery_point
        self._log_end_offset = 0
        self._last_flush_ms = clock()
        self._dir_needs_fsync = False

    # -- segment bookkeeping (callers hold the lock) ---------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        self._dir_needs_fsync = True
        for stale in self.dir.glob(f"{filename_prefix_from_offset(base_offset)}.*"):
            # An empty leftover at the same base offset (e.g. after truncation) is replaced.
            if stale.suffix in INDEX_FILE_SUFFIXES:
                stale.unlink()
        return LogSegment.open(self.dir, base_offset, self.config, now_ms=self.clock())

    def _add_segment(self, segment: LogSegment) -> None:
        if segment.base_offset not in self._segments:
            bisect.insort(self._base_offsets, segment.base_offset)
        self._segments[segment.base_offset] = segment

    def _remove_segment(self, base_offset: int) -> LogSegment:
        segment = self._segments.pop(base_offset)
        self._base_offsets.remove(base_offset)
        return segment

    def _schedule_delete(self, segment: LogSegment) -> None:
        """Rename to ``.deleted`` now, delete after file.delete.delay.ms (readers may still
        be sending from it)."""
        segment.change_file_suffixes("", DELETED_FILE_SUFFIX)
        due = self.clock() + self.config.file_delete_delay_ms
        self._pending_deletes.append((due, segment))

    def _floor_segment(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        return self._segments[self._base_offsets[i]] if i >= 0 else None

    def _segments_from(self, offset: int) -> list[int]:
        i = max(0, bisect.bisect_right(self._base_offsets, offset) - 1)
        return self._base_offsets[i:]

    # -- properties ---------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[self._base_offsets[-1]]

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return [self._segments[b] for b in self._base_offsets]

    @property
    def number_of_segments(self) -> int:
        return len(self._base_offsets)

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset


    @property
    def recovery_point(self) -> int:
        return self._recovery_point


    @property
    def size(self) -> int:
        """Bytes of all segments."""
        with self._lock:
            return sum(s.size for s in self._segments.values())

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self.active_segment
        return LogOffsetMetadata(self._log_end_offset, active.base_offset, active.size)

    @property
    def pending_deletes(self) -> list[Path]:
        return [segment.log_path for _due, segment in self._pending_deletes]


    @locked
    def update_config(self, config: LogConfig) -> None:
        self.config = config

    @locked
    def delete_pending(self, now_ms: int | None = None) -> int:
        """Delete the ``.deleted`` segments whose file.delete.delay.ms has passed."""
        now = self.clock() if now_ms is None else now_ms
        due = [(t, s) for t, s in self._pending_deletes if t <= now]
        self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        for _t, segment in due:
            segment.delete_if_exists()
        return len(due)

    # -- flushing -----------------------------------------------------------------------

    @locked
    def flush(self, offset: int | None = None) -> None:
        """fsync segments holding offsets in [recovery_point, offset) (default: all) and
        move the recovery point to ``offset``."""
        self._flush(self._log_end_offset if offset is None else offset)

    def _flush(self, offset: int) -> None:
        offset = min(offset, self._log_end_offset)
        if self._dir_needs_fsync:
            fsync_dir(self.dir)
            self._dir_needs_fsync = False
        if offset <= self._recovery_point:
            return
        for base in self._segments_from(self._recovery_point):
            if base >= offset:
                break
            self._segments[base].flush()
        self._recovery_point = offset
        self._last_flush_ms = self.clock()

    @locked
    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """The flush policy: flush.messages unflushed messages, or flush.ms since the last
        flush, or a rolled segment not yet flushed. Returns whether it flushed."""
        now = self.clock() if now_ms is None else now_ms
        unflushed = self._log_end_offset - self._recovery_point
        if unflushed <= 0:
            return False
        if unflushed >= self.config.flush_messages or (
            now - self._last_flush_ms >= self.config.flush_ms
        ):
            self._flush(self._log_end_offset)
            return True
        if self.active_segment.base_offset > self._recovery_point:
            # Kafka flushes rolled segments right after a roll.
            self._flush(self.active_segment.base_offset)
            return True
        return False

    @locked
    def delete(self) -> None:
        """Close and remove the whole directory (topic deletion, after the rename)."""
        for base in list(self._base_offsets):
            self._remove_segment(base).delete_if_exists()
        for _t, segment in self._pending_deletes:
            segment.delete_if_exists()
        self._pending_deletes.clear()
        for entry in self.dir.iterdir():
            if entry.is_file():
                entry.unlink()
        self.dir.rmdir()
