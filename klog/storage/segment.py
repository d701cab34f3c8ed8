"""A log segment in Kafka's on-disk format: one .log file and its three index files.

This module owns ``LogSegment`` (Kafka's LogSegment): it appends whole batches, reads whole
batches as file regions (never decoding records: only batch headers are read, with
``os.pread``), translates offsets and timestamps through the indexes, truncates, recovers
and renames its files. Its memory does not depend on the segment's size. What it builds on
lives beside it: file names (files.py), recovery's scan and index rebuild (scan.py), the
values it returns (values.py), the indexes (index.py), its reads' header walk (heads.py),
its four files handled as one (segment_files.py).

A read finds its first batch through the offset index (or a boundary remembered from the
previous read: sequential readers ask for the offset after the last region) and its last
through the index's positions, which are batch starts: only the batches after the last
entry within the budget are read, usually one header. Runs of small batches are walked
from one buffered pread.

The C read path (klog/storage/_fastread.c) is configured here, and installed in front of
``FetchDataInfo.readinto`` (values.py) and, by log.py, ``PartitionLog.read``.

Locking: ``LogSegment`` is not thread-safe; the ``PartitionLog`` lock serialises every call.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from socket import ntohl as _be32  # a C byte swap for index column views (see index.py)
from types import ModuleType
from typing import TYPE_CHECKING

from klog.protocol.records.batch import (
    DEFAULT_MAX_BATCH_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    V2_OFFSETS_HEAD,
    BatchHeader,
)
from klog.storage.files import (
    log_file_path,
    offset_index_file_path,
    time_index_file_path,
    txn_index_file_path,
)
from klog.storage.heads import (
    WALK_CHUNK,
    WALK_HEAD_SIZE,
    Peek,
    head_at,
    iter_batches,
    iter_peeks,
)
from klog.storage.index import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MAX_INDEX_SIZE,
    INT32_MAX,
    OFFSET_ENTRY_PAIR,
    OFFSET_INDEX_ENTRY_SIZE,
    AbortedTxn,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
    TxnIndexSearchResult,
)
from klog.storage.scan import _scan, rebuild_indexes
from klog.storage.segment_files import SegmentFiles
from klog.storage.values import (
    FetchDataInfo,
    LogOffsetMetadata,
    LogOffsetPosition,
    RollParams,
    TimestampAndOffset,
    _region,
)

if TYPE_CHECKING:
    from klog.storage.leader_epoch import LeaderEpochFileCache
    from klog.storage.producer_state import CompletedTxn, ProducerStateManager

_LOG_OVERHEAD = struct.Struct(">qi")
_OFFSET_ENTRY = struct.Struct(">ii")  # an .index entry (index.py's layout)
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__
# Batch boundaries a segment remembers (see LogSegment._boundaries): one per sequential
# reader and one for the high watermark are what is used; 32 (a few KiB) leaves room.
_BOUNDARY_CACHE_SIZE = 32
# LogSegment._chained_from when no offset index entry is known to be chained.
_UNCHAINED = 1 << 62


# -- errors ---------------------------------------------------------------------------------


class LogSegmentOffsetOverflowError(Exception):
    """A batch whose offset does not fit the segment's int32 relative offsets.

    Recovery raises this instead of truncating: the bytes are valid, only misplaced
    (Kafka splits such segments; klog refuses to load them and says so).
    """

    def __init__(self, segment_path: Path, base_offset: int, offset: int) -> None:
        super().__init__(
            f"detected offset overflow at offset {offset} in segment {segment_path} "
            f"(base offset {base_offset})"
        )
        self.offset = offset


# -- the segment ----------------------------------------------------------------------------

# Builds a FetchDataInfo without its dataclass __init__ frame (the read path, inline).
_new_object = object.__new__


class LogSegment(SegmentFiles):
    """One segment: an append-only .log file plus its lazily opened indexes.

    Kafka's LogSegment. The .log file descriptor stays open for the segment's life (the
    only descriptor a segment holds: index mappings keep none, see index.py); indexes are
    mapped on first use and released when the segment stops being active or has been
    checked at load (``release_indexes``), so thousands of idle segments map nothing.
    Not thread-safe: the owning PartitionLog's lock serialises every call.
    """

    # The attributes klog/storage/_fastread.c reads, as slots (it reads them at fixed
    # offsets); everything else lives in the instance dict as usual.
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_boundaries",
        "_chained_from",
        "_fd",
        "_offset_index",
        "_size",
        "base_offset",
        "log_path",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        roll_jitter_ms: int = 0,
        file_suffix: str = "",
        now_ms: int | None = None,
        file_already_exists: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.log_path = log_file_path(self.directory, base_offset, file_suffix)
        self.offset_index_path = offset_index_file_path(self.directory, base_offset, file_suffix)
        self.time_index_path = time_index_file_path(self.directory, base_offset, file_suffix)
        flags = os.O_RDWR if file_already_exists else os.O_RDWR | os.O_CREAT
        self._fd: int | None = os.open(self.log_path, flags, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.txn_index = TransactionIndex(
            txn_index_file_path(self.directory, base_offset, file_suffix), base_offset
        )
        self.created_ms = _now_ms() if now_ms is None else now_ms
        self._rolling_based_timestamp: int | None = None
        self._max_timestamp_and_offset: TimestampOffset | None = None  # None = not read yet
        self._bytes_since_last_index_entry = 0
        # Batch boundaries learnt by reads: offset -> (position, size, last offset, index
        # slot) of the first batch whose last offset is >= that offset (size 0: header
        # not read yet, e.g. at the end of the log; slot: an offset index entry at or
        # before it, -1 if none is known). A sequential reader's next fetch offset is a
        # key, so its next read starts without an index search or a header read. Bounded
        # (_BOUNDARY_CACHE_SIZE); batches never change in place, and truncation and
        # recovery clear it.
        self._boundaries: dict[int, tuple[int, int, int, int]] = {}
        # Offset index entries from this slot on are "chained": each is one batch's own
        # entry (its last offset -> its position), each batch starts where the previous
        # entry's batch ends, and the last one's batch is the last of the segment. There a
        # batch's size and offsets come from the index alone, without reading its header
        # (klog/storage/_fastread.c relies on it). Appends keep it (append_unless_roll_due:
        # an append without an entry, or of several batches, moves it past the entries so
        # far); recovery computes it; an index opened from disk is not trusted with it.
        self._chained_from = 0 if self._size == 0 and not file_already_exists else _UNCHAINED

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: object | None = None,
        *,
        file_suffix: str = "",
        now_ms: int | None = None,
        file_already_exists: bool = False,
        roll_jitter_ms: int = 0,
    ) -> LogSegment:
        """Open (or create) a segment with a LogConfig's index settings."""
        interval = getattr(config, "index_interval_bytes", DEFAULT_INDEX_INTERVAL_BYTES)
        max_index = getattr(config, "segment_index_bytes", DEFAULT_MAX_INDEX_SIZE)
        return cls(
            directory,
            base_offset,
            index_interval_bytes=interval,
            max_index_size=max_index,
            roll_jitter_ms=roll_jitter_ms,
            file_suffix=file_suffix,
            now_ms=now_ms,
            file_already_exists=file_already_exists,
        )

    # -- basic properties ----------------------------------------------------------------

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return self._fd

    @property
    def size(self) -> int:
        """Bytes in the .log file."""
        return self._size

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = OffsetIndex(
                self.offset_index_path, self.base_offset, self.max_index_size
            )
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = TimeIndex(
                self.time_index_path, self.base_offset, self.max_index_size
            )
        return self._time_index

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, path={self.log_path})"
        )

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    @property
    def max_timestamp_and_offset_so_far(self) -> TimestampOffset:
        if self._max_timestamp_and_offset is None:
            self._max_timestamp_and_offset = self.time_index.last_entry
        return self._max_timestamp_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far.timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far.offset

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)

    def set_last_modified(self, ms: int) -> None:
        for path in (self.log_path, self.offset_index_path, self.time_index_path):
            if path.exists():
                os.utime(path, (ms / 1000, ms / 1000))

    @property
    def largest_record_timestamp(self) -> int | None:
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else None

    @property
    def largest_timestamp(self) -> int:
        """The max record timestamp, or the file's mtime when no record has one."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms

    # -- checks ----------------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Raise CorruptIndexError / FileNotFoundError unless the indexes can be trusted.

        Stricter than Kafka (which defers to recovery): both index files must exist and
        pass their sanity checks, and the offset index must point inside the log.
        """
        for path in (self.offset_index_path, self.time_index_path):
            if not path.exists():
                raise FileNotFoundError(f"index file {path} does not exist")
        self.offset_index.sanity_check(log_size=self._size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()
        last_time = self.time_index.last_entry
        if self.time_index.entries and last_time.offset > self.read_next_offset() - 1:
            raise CorruptIndexError(
                f"time index {self.time_index_path} points at offset {last_time.offset} past "
                f"the end of the log"
            )

    # -- append ----------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
        single_batch: bool = False,
    ) -> None:
        """Append whole batches; add an index entry every ``index.interval.bytes``.

        As in Kafka, the index entry maps the append's largest offset to the position of
        its first byte; the time index gains an entry at the same moments when the max
        timestamp grew. ``single_batch``: ``records`` is known to be one batch.
        """
        self.append_unless_roll_due(
            largest_offset,
            largest_timestamp,
            offset_of_max_timestamp,
            records,
            None,
            single_batch=single_batch,
        )

    def append_unless_roll_due(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
        clock: Callable[[], int] | None,
        max_segment_bytes: int = 0,
        max_segment_ms: int = 0,
        single_batch: bool = False,
    ) -> bool:
        """``append``, first asking ``roll_due`` (with ``clock``; None: no roll check) for
        these records: False, with nothing written, when the segment must roll first.

        The produce path's form: one call for the check and the write.
        """
        # Once per produce request: properties and helpers are inlined.
        n = len(records)
        physical_position = self._size
        relative = largest_offset - self.base_offset
        if clock is not None:
            # roll_due, inline.
            if physical_position > max_segment_bytes - n or relative < 0 or relative > INT32_MAX:
                return False
            index = self._offset_index or self.offset_index
            time_index = self._time_index or self.time_index
            if (
                index._entries >= index._max_entries
                or time_index._entries >= time_index._max_entries - 1
            ):
                return False
            if physical_position > 0:
                ts = self._rolling_based_timestamp
                if ts is None:
                    ts = self._rolling_based_timestamp = self.first_batch_timestamp()
                if ts is not None and ts >= 0:
                    waited = largest_timestamp - ts
                else:
                    waited = clock() - self.created_ms
                if waited > max_segment_ms - self.roll_jitter_ms:
                    return False
        if n == 0:
            return True
        if physical_position == 0:
            self._rolling_based_timestamp = largest_timestamp
        if relative < 0 or relative > INT32_MAX:
            raise LogSegmentOffsetOverflowError(self.log_path, self.base_offset, largest_offset)
        fd = self._fd
        if fd is None:
            fd = self.fd  # raises: closed
        written = os.pwrite(fd, records, physical_position)
        if written < n:
            view = memoryview(records)
            while written < n:
                written += os.pwrite(fd, view[written:], physical_position + written)
        self._size = physical_position + n
        max_so_far = self._max_timestamp_and_offset
        if max_so_far is None:
            max_so_far = self.max_timestamp_and_offset_so_far
        if largest_timestamp > max_so_far[0]:
            max_so_far = self._max_timestamp_and_offset = _new_tuple(
                TimestampOffset, (largest_timestamp, offset_of_max_timestamp)
            )
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            index = self._offset_index or self.offset_index
            entries = index._entries
            # Until the entry is in, it is not chained (nor is it after, for several batches).
            chained_from = self._chained_from
            self._chained_from = entries + 1
            if (
                entries < index._max_entries
                and (entries == 0 or largest_offset > index._last_offset)
                and index.writable
                and index._mmap is not None
            ):
                # OffsetIndex.append's work, its checks passed (``relative`` was checked
                # above); anything else goes through it to raise as it does.
                _OFFSET_ENTRY.pack_into(
                    index._mmap, entries * OFFSET_INDEX_ENTRY_SIZE, relative, physical_position
                )
                index._entries = entries + 1
                index._last_offset = largest_offset
            else:
                index.append(largest_offset, physical_position)
            if single_batch:
                # The batch's own entry: it goes on the chain, or starts one.
                self._chained_from = min(chained_from, entries)
            time_index = self._time_index or self.time_index
            # maybe_append adds nothing for a timestamp not past its last entry's; it is
            # still asked when full, to raise as it always did.
            if (
                max_so_far[0] > time_index._last_entry[0]
                or time_index._entries >= time_index._max_entries - 1
            ):
                time_index.maybe_append(max_so_far[0], max_so_far[1])
            self._bytes_since_last_index_entry = n
        else:
            self._bytes_since_last_index_entry += n
            # A batch without an entry: the chain can only start at the next entry.
            self._chained_from = (self._offset_index or self.offset_index)._entries
        return True

    def update_txn_index(self, completed_txn: CompletedTxn, last_stable_offset: int) -> None:
        """Record an aborted transaction."""
        if completed_txn.is_aborted:
            self.txn_index.append(
                AbortedTxn(
                    producer_id=completed_txn.producer_id,
                    first_offset=completed_txn.first_offset,
                    last_offset=completed_txn.last_offset,
                    last_stable_offset=last_stable_offset,
                )
            )

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # -- reads -----------------------------------------------------------------------------

    def _peeks(self, position: int) -> Iterator[Peek]:
        """The headers from the batch at ``position`` to the end (heads.py's walk)."""
        return iter_peeks(self.fd, self.log_path, position, self._size)

    def _remember(self, offset: int, batch: tuple[int, int, int, int]) -> None:
        boundaries = self._boundaries
        if len(boundaries) >= _BOUNDARY_CACHE_SIZE:
            # Start over rather than evict one by one: deleting a dict's oldest keys
            # leaves holes that every later next(iter(...)) walks over.
            boundaries.clear()
        boundaries[offset] = batch

    def _locate(self, offset: int) -> tuple[int, int, int, int] | None:
        """(position, size, last offset, index slot) of the first batch whose last offset
        is >= ``offset`` (None past the last batch); the slot is an offset index entry at
        or before the batch (-1: none). From a remembered boundary, else through the offset
        index and a walk of at most about index.interval.bytes of headers."""
        known = self._boundaries.get(offset)
        if known is not None:
            if known[1]:
                return known
            if known[0] < self._size:
                head = head_at(self.fd, self.log_path, known[0], self._size)
                if head is not None:
                    batch = (known[0], head[0], head[1], known[3])
                    self._boundaries[offset] = batch
                    return batch
            return None
        index = self.offset_index
        slot = index.slot_for_offset(offset)
        position = index.position_at(slot) if slot >= 0 else 0
        for at, size, last, _base in iter_batches(
            self.fd, self.log_path, position, self._size, self._size
        ):
            if last >= offset:
                batch = (at, size, last, slot)
                # Any offset works as a key (the high watermark is looked up per fetch).
                self._remember(offset, batch)
                return batch
        return None

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is >= ``offset`` (None past the end)."""
        if starting_position <= 0:
            found = self._locate(offset)
            return None if found is None else LogOffsetPosition(found[2], found[0], found[1])
        mapping = self.offset_index.lookup(offset)
        for peek in self._peeks(max(mapping.position, starting_position)):
            if peek.last_offset >= offset:
                return LogOffsetPosition(peek.last_offset, peek.position, peek.size)
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        With ``min_one_message`` the first batch is returned even if bigger than
        ``max_size``. ``max_position`` bounds what is exposed (e.g. the high watermark's
        position). None when ``start_offset`` is past the last batch. Only headers are read.
        """
        # Once per fetch: each step here is a measurable share of a small read.
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment {self}")
        start = self._boundaries.get(start_offset)
        if start is None or not start[1]:
            start = self._locate(start_offset)
            if start is None:
                return None
        position, first_size, last_offset, slot = start
        metadata = _new_tuple(LogOffsetMetadata, (start_offset, self.base_offset, position))
        limit = self._size
        if max_position is not None and max_position < limit:
            limit = max_position
        if max_size >= first_size:
            budget_end = position + max_size
        elif min_one_message:
            budget_end = position + first_size
        else:
            return FetchDataInfo(metadata, self.log_path, self._fd, position, 0, True)
        if position >= limit:
            return FetchDataInfo(metadata, self.log_path, self._fd, position, 0)
        if budget_end > limit:
            budget_end = limit
        end = position + first_size
        if end < budget_end:
            # The sequential reader's case, inline (``_extend`` is the general one and the
            # reference): guess the offset index entry where the region ends, from the
            # slot it starts at and the entries' spacing (more than index.interval.bytes,
            # one per batch when batches are bigger); if that entry's batch starts inside
            # the budget but does not fit, the region ends there, and when the previous
            # entry's offset is just below that batch's base offset, it is the region's
            # last offset (see _extend). One header read; anything else goes to _extend.
            index = self._offset_index
            fd = self._fd
            if index is not None and slot >= 0 and fd is not None:
                gap = self.index_interval_bytes + 1
                if first_size > gap:
                    gap = first_size
                guess = slot + (budget_end - position) // gap
                if 0 < guess < index._entries:
                    # index._entries > 0 means its mapping is open; not re-checked on
                    # this path, which runs per sequential read.
                    previous, _p, _o, jump = OFFSET_ENTRY_PAIR.unpack_from(
                        index._mmap,  # type: ignore[arg-type]
                        (guess - 1) * OFFSET_INDEX_ENTRY_SIZE,
                    )
                    if end < jump <= budget_end:
                        head = os.pread(fd, WALK_HEAD_SIZE, jump)
                        if len(head) == WALK_HEAD_SIZE and head[MAGIC_OFFSET] == MAGIC_V2:
                            base, length, delta = V2_OFFSETS_HEAD.unpack(head)
                            next_end = jump + length + LOG_OVERHEAD
                            if (
                                next_end > budget_end
                                and next_end <= self._size
                                and length + LOG_OVERHEAD >= RECORD_BATCH_OVERHEAD
                                and base == self.base_offset + previous + 1
                            ):
                                boundaries = self._boundaries
                                if len(boundaries) >= _BOUNDARY_CACHE_SIZE:
                                    boundaries.clear()  # see _remember
                                boundaries[base] = (jump, next_end - jump, base + delta, guess)
                                # _region's work, inline.
                                info = _new_object(FetchDataInfo)
                                info.fetch_offset_metadata = metadata
                                info.path = self.log_path
                                info.fd = fd
                                info.position = position
                                info.size = jump - position
                                info.first_entry_incomplete = False
                                info.aborted_transactions = None
                                info.last_offset = base - 1
                                return info
            end, last_offset = self._extend(end, last_offset, budget_end, first_size, slot)
        return _region(metadata, self.log_path, self._fd, position, end - position, last_offset)

    def _extend(
        self, end: int, last: int, budget_end: int, batch_size: int, slot: int
    ) -> tuple[int, int]:
        """Grow a region ending at the batch boundary ``end`` (``last`` = the last offset
        before it) by the whole batches that fit before ``budget_end``; return the new
        (end, last). ``slot`` is a hint: an offset index entry at or before the region
        (-1: none known); ``batch_size`` is the size of the region's first batch. Where it
        stops is remembered for the next read.

        The offset index's positions are batch starts: every batch before the last entry
        at or below ``budget_end`` fits, so only the batches from that entry on are read.
        """
        index = self._offset_index or self.offset_index
        entries = index._entries  # the index's own fields, read directly: once per fetch
        jump = -1
        if entries:
            columns = index._columns or index.columns()
            offsets, positions = columns[0], columns[1]
            if 0 <= slot < entries:
                # A sequential reader's next region ends a few entries further on. Entries
                # are more than index.interval.bytes apart (one per batch when batches are
                # bigger): guess from that; bisect only below a guess that went too far.
                hint = slot
                gap = self.index_interval_bytes + 1
                if batch_size > gap:
                    gap = batch_size
                slot += (budget_end - end + batch_size) // gap
                if slot >= entries:
                    slot = entries - 1
                if _be32(positions[slot]) > budget_end:
                    slot = bisect_right(positions, budget_end, hint, slot, key=_be32) - 1
                    if slot < hint:  # the hint was past the budget after all
                        slot = index.slot_for_position(budget_end)
            else:
                slot = index.slot_for_position(budget_end)
            if slot >= 0:
                jump = _be32(positions[slot])
            for _attempt in (0, 1):
                if jump <= end:
                    break
                found = head_at(self.fd, self.log_path, jump, self._size)
                if found is None:
                    break
                size, jump_last, base = found
                if jump + size > budget_end:
                    # The indexed batch does not fit: the region ends where it starts. An
                    # entry's offset is the last offset of a batch between it and the next
                    # entry, so the batch before ``jump`` ends at or after the previous
                    # entry's offset and before ``base``: when those are adjacent, that is
                    # its last offset, without reading it.
                    if slot > 0 and base > 0 and (
                        self.base_offset + _be32(offsets[slot - 1]) == base - 1
                    ):
                        last = base - 1
                    else:
                        last = self._last_offset_before(jump, slot, end)
                    self._remember(last + 1, (jump, size, jump_last, slot))
                    return jump, last
                end, last = jump + size, jump_last
                # The guess fell short: find the right entry and jump once more.
                if slot + 1 >= entries or _be32(positions[slot + 1]) > budget_end:
                    break
                slot = bisect_right(positions, budget_end, slot + 1, entries, key=_be32) - 1
                jump = _be32(positions[slot])
        if jump > end:
            slot = -1  # not a valid hint for what the walk finds
        for at, size, batch_last, _base in iter_batches(
            self.fd, self.log_path, end, budget_end, self._size, batch_size >= WALK_CHUNK
        ):
            if at + size > budget_end:
                self._remember(last + 1, (at, size, batch_last, slot))
                return end, last
            end, last = at + size, batch_last
        self._remember(last + 1, (end, 0, 0, slot))
        return end, last

    def _last_offset_before(self, position: int, slot: int, floor: int) -> int:
        """The last offset of the batch that ends at ``position`` (index entry ``slot``'s
        position), read from the previous entry's position or ``floor`` (a batch boundary
        before it), whichever is later."""
        walk_from = floor
        if slot > 0:
            walk_from = max(floor, self.offset_index.position_at(slot - 1))
        last = -1
        for _at, _size, batch_last, _base in iter_batches(
            self.fd, self.log_path, walk_from, position, self._size
        ):
            last = batch_last
        return last

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when empty). Walks from the last
        index entry, so it costs at most ``index.interval.bytes`` of headers."""
        last = None
        for peek in self._peeks(
            self.offset_index.lookup(self.offset_index.last_offset).position
        ):
            last = peek
        return self.base_offset if last is None else last.last_offset + 1

    def first_batch_timestamp(self) -> int | None:
        for peek in self._peeks(0):
            return peek.max_timestamp
        return None

    def find_offset_by_timestamp(
        self,
        timestamp: int,
        starting_offset: int | None = None,
        record_locator: Callable[[bytes], Iterator[tuple[int, int]]] | None = None,
    ) -> TimestampAndOffset | None:
        """The first offset >= ``starting_offset`` whose timestamp is >= ``timestamp``.

        Kafka answers with the exact record, which means reading the records of the
        batch found. ``record_locator(batch_bytes)`` yields (offset, timestamp) per record
        and gives that exact answer (the daemon passes the v2 record decoder). Without it
        the answer is at batch granularity: the first batch whose max timestamp reaches
        the target, reported at max(base offset, starting_offset) with the batch's max
        timestamp.
        """
        starting = self.base_offset if starting_offset is None else starting_offset
        time_entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(time_entry.offset, starting)).position
        for peek in self._peeks(position):
            if peek.max_timestamp < timestamp or peek.last_offset < starting:
                continue
            epoch = peek.partition_leader_epoch if peek.partition_leader_epoch >= 0 else None
            if record_locator is not None:
                data = os.pread(self.fd, peek.size, peek.position)
                for offset, ts in record_locator(data):
                    if ts >= timestamp and offset >= starting:
                        return TimestampAndOffset(ts, offset, epoch)
                continue
            return TimestampAndOffset(peek.max_timestamp, max(peek.base_offset, starting), epoch)
        return None

    # -- rolling ---------------------------------------------------------------------------

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        if self._rolling_based_timestamp is None:
            self._rolling_based_timestamp = self.first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's roll conditions: size, age, a full index, or a relative offset overflow."""
        return self.should_roll_for(
            params.messages_size,
            params.max_timestamp_in_messages,
            params.max_offset_in_messages,
            params.now_ms,
            params.max_segment_bytes,
            params.max_segment_ms,
        )

    def should_roll_for(
        self,
        messages_size: int,
        max_timestamp: int,
        max_offset: int,
        now_ms: int,
        max_segment_bytes: int,
        max_segment_ms: int,
    ) -> bool:
        """``should_roll`` without a RollParams: the produce path asks once per append."""
        return self.roll_due(
            messages_size, max_timestamp, max_offset, max_segment_bytes, max_segment_ms,
            lambda: now_ms,
        )

    def roll_due(
        self,
        messages_size: int,
        max_timestamp: int,
        max_offset: int,
        max_segment_bytes: int,
        max_segment_ms: int,
        clock: Callable[[], int],
    ) -> bool:
        """``should_roll_for`` asking ``clock`` for the time only when the age of the
        segment must come from it (no record timestamps): the produce path's form."""
        size = self._size
        if size > max_segment_bytes - messages_size:
            return True
        relative = max_offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            return True
        # The indexes' own counters (their is_full properties), read directly.
        index = self._offset_index or self.offset_index
        if index._entries >= index._max_entries:
            return True
        time_index = self._time_index or self.time_index
        if time_index._entries >= time_index._max_entries - 1:
            return True
        if size == 0:
            return False
        ts = self._rolling_based_timestamp
        if ts is None:
            ts = self._rolling_based_timestamp = self.first_batch_timestamp()
        waited = max_timestamp - ts if ts is not None and ts >= 0 else clock() - self.created_ms
        return waited > max_segment_ms - self.roll_jitter_ms

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def on_become_inactive_segment(self) -> None:
        """At roll: record the max timestamp in the time index, trim both indexes and
        release their mappings (the next lookup maps them again, see ``release_indexes``)."""
        ts = self.max_timestamp_and_offset_so_far
        self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.release_indexes()

    def release_indexes(self) -> None:
        """Unmap the offset and time indexes without writing; the ``offset_index`` and
        ``time_index`` properties map them again on first use (Kafka's LazyIndex).

        Only for indexes whose files hold exactly their entries (an inactive segment's,
        trimmed at roll, or one just loaded and checked): a file opened again counts
        ``size / entry size`` entries. A partition at rest thus maps the indexes of its
        active segment only, however many segments it has.
        """
        # The files keep the entries the mappings had, so ``_chained_from`` stays true.
        self._close_indexes()

    # -- truncation and recovery -----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding offsets >= ``offset``; return bytes removed.

        A batch that straddles ``offset`` goes as a whole (offsets are per batch on disk).
        """
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        # The segment becomes active again: give the indexes room.
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        truncated = 0
        self._boundaries.clear()
        # What is left of a chain stays one (a truncation removes whole batches from the end).
        self._chained_from = min(self._chained_from, self.offset_index.entries)
        if mapping is not None:
            truncated = self._size - mapping.position
            os.ftruncate(self.fd, mapping.position)
            self._size = mapping.position
        if self._size == 0:
            self.created_ms = _now_ms()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = self._bytes_after_last_index_entry()
        self._max_timestamp_and_offset = self._read_largest_timestamp()
        return truncated

    def _read_largest_timestamp(self) -> TimestampOffset:
        last = self.time_index.last_entry
        position = self.offset_index.lookup(last.offset).position
        best = last
        for peek in self._peeks(position):
            if peek.max_timestamp > best.timestamp:
                best = TimestampOffset(peek.max_timestamp, peek.last_offset)
        return best

    def recover(
        self,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        producer_state: ProducerStateManager | None = None,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
    ) -> int:
        """Validate the .log from position 0, cut it at the first invalid byte, rebuild the
        indexes (and the transaction index, producer state and leader epochs on the way).

        Returns the number of bytes truncated. A batch whose offsets overflow the
        segment raises LogSegmentOffsetOverflowError and nothing is truncated.
        """
        scan, overflow = _scan(
            self.log_path,
            max_batch_size=max_batch_size,
            verify_crc=True,
            start_position=0,
            expected_min_offset=self.base_offset,
            progress=None,
        )
        if overflow is not None:
            raise LogSegmentOffsetOverflowError(self.log_path, self.base_offset, overflow)
        self._close_indexes()
        if producer_state is not None:
            # Only producer state can rebuild the aborted transactions; without it the
            # existing .txnindex is kept as it is.
            self.txn_index.reset()
        self._boundaries.clear()
        if scan.valid_bytes < self._size:
            os.ftruncate(self.fd, scan.valid_bytes)
            self._size = scan.valid_bytes

        def on_batch(position: int, header: BatchHeader, entry: memoryview) -> None:
            if header.magic < MAGIC_V2:
                return
            if leader_epoch_cache is not None and header.partition_leader_epoch >= 0:
                latest = leader_epoch_cache.latest_epoch
                if latest is None or header.partition_leader_epoch > latest:
                    # v2 (checked above): base_offset is never None.
                    leader_epoch_cache.assign(
                        header.partition_leader_epoch, header.base_offset or 0
                    )
            if producer_state is not None:
                completed = producer_state.update_from_batch(header, entry)
                if completed is not None:
                    lso = producer_state.last_stable_offset(completed)
                    self.update_txn_index(completed, lso)
                    producer_state.complete_txn(completed)
                producer_state.update_map_end_offset(header.last_offset + 1)

        rebuilt = rebuild_indexes(
            self.log_path,
            self.base_offset,
            valid_bytes=scan.valid_bytes,
            index_interval_bytes=self.index_interval_bytes,
            max_index_size=self.max_index_size,
            max_batch_size=max_batch_size,
            on_batch=on_batch,
        )
        self._chained_from = rebuilt.chained_from
        self._bytes_since_last_index_entry = self._bytes_after_last_index_entry()
        self._max_timestamp_and_offset = TimestampOffset(
            rebuilt.max_timestamp,
            rebuilt.offset_of_max_timestamp
            if rebuilt.offset_of_max_timestamp >= 0
            else self.base_offset,
        )
        return scan.truncated_bytes

    def _bytes_after_last_index_entry(self) -> int:
        """Bytes from the last offset index entry's batch to the end (the whole segment
        when there is none): after a truncation or recovery, the next append is indexed
        when it would have been had the segment never been reopened or cut (so batches
        bigger than index.interval.bytes keep one entry each, and their chain)."""
        index = self.offset_index
        if index.entries == 0:
            return self._size
        return self._size - index.position_at(index.entries - 1)

    def has_overflow(self) -> bool:
        next_offset = self.read_next_offset()
        return next_offset > self.base_offset and not self.can_convert_to_relative_offset(
            next_offset - 1
        )

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Record the max timestamp in the time index, trim the indexes, close the file."""
        if self._fd is None:
            return
        if self._max_timestamp_and_offset is not None and self.time_index_path.exists():
            ts = self._max_timestamp_and_offset
            with contextlib.suppress(Exception):
                self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close()
        self._offset_index = self._time_index = None
        os.close(self._fd)
        self._fd = None



def _now_ms() -> int:
    return int(time.time() * 1000)


# The sequential reader's read path in C (klog/storage/_fastread.c): log.py puts it in front
# of PartitionLog.read. None when klog was built without a C compiler (the Python path does
# the same) or with KLOG_PURE_PYTHON=1 in the environment (for comparisons).
fastread: ModuleType | None = None
if not os.environ.get("KLOG_PURE_PYTHON"):
    try:
        from klog.storage import _fastread
    except ImportError:
        pass
    else:
        _fastread.configure(
            FetchDataInfo, LogOffsetMetadata, _BOUNDARY_CACHE_SIZE, LogSegment, OffsetIndex
        )
        fastread = _fastread

# FetchDataInfo.readinto as written above: the reference, and what the C readinto calls
# when it cannot do the read in one pread (a closed descriptor, a short read, a bad buffer).
python_readinto = FetchDataInfo.readinto
if fastread is not None:
    # The C method descriptor replaces the Python one on purpose.
    FetchDataInfo.readinto = fastread.readinto_method(  # type: ignore[method-assign]
        FetchDataInfo, python_readinto
    )
