"""Reading a .log file offline: the scan that validates it and the rebuild of its indexes.

This module owns the two read-only/offline primitives that every consumer of a segment
file shares:

- ``scan_segment`` walks a .log file from a position in big chunks and validates each
  entry exactly as recovery does (length bounds and magic via ``records.batch``, CRC,
  offsets strictly increasing and within the segment). It reports the first invalid byte
  and never writes. ``klog verify`` / ``klog recover`` and ``LogSegment.recover`` all use it.
- ``rebuild_indexes`` writes fresh .index and .timeindex files for the valid prefix of a
  .log, with Kafka's recovery rules (an entry every ``index.interval.bytes``), through a
  temporary file renamed over the old one, so a crash never leaves half an index.

Both walk the file with walk.py's ``BatchWalk`` and add recovery's rules to it
(``_iter_file_batches``, which log.py's producer-state rebuild also uses). Memory is one
chunk plus at most one batch bigger than it, whatever the segment's size. The functions
hold no state; nothing here knows a ``LogSegment``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import DEFAULT_MAX_BATCH_SIZE, NO_TIMESTAMP, BatchHeader
from klog.storage.files import TMP_FILE_SUFFIX, offset_index_file_path, time_index_file_path
from klog.storage.index import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_MAX_INDEX_SIZE,
    INT32_MAX,
    OffsetIndex,
    TimeIndex,
)
from klog.storage.walk import BatchWalk

SCAN_CHUNK_SIZE = 8 * 1024 * 1024

_INT64 = struct.Struct(">q")


# -- scanning -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentScan:
    """What ``scan_segment`` found in one .log file.

    ``valid_bytes`` is the length of the valid prefix (from ``start_position``'s point of
    view it is an absolute file position). ``records`` sums ``recordsCount`` of v2 batches
    and counts 1 per uncompressed legacy message; compressed legacy wrappers are counted
    as batches only (their inner count needs decompression). ``first_offset`` is the base
    offset of the first entry (None if there is none, or if it is a compressed legacy
    wrapper). ``max_timestamp`` is -1 when no entry carries a timestamp, and
    ``offset_of_max_timestamp`` is then -1 too.
    """

    file_size: int
    valid_bytes: int
    batches: int
    records: int
    first_offset: int | None
    last_offset: int | None
    max_timestamp: int
    offset_of_max_timestamp: int
    error: str | None
    error_position: int | None
    error_offset: int | None

    @property
    def truncated_bytes(self) -> int:
        """Bytes past the valid prefix (what recovery would cut off)."""
        return self.file_size - self.valid_bytes

    @property
    def is_clean(self) -> bool:
        return self.error is None


@dataclass(slots=True)
class _ScanState:
    position: int
    error: str | None = None
    error_position: int | None = None
    error_offset: int | None = None
    overflow_offset: int | None = None


def _iter_file_batches(
    fd: int,
    state: _ScanState,
    end: int,
    *,
    max_batch_size: int,
    verify_crc: bool,
    expected_min_offset: int | None,
    chunk_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Yield (file position, header, entry bytes) for each valid entry in [position, end).

    The walk is walk.py's ``BatchWalk`` (framing, chunked reads, one reused buffer); this
    adds recovery's rules. Entry bytes are a view into the reused buffer, valid until the
    next item. Stops at the first invalid byte and records why in ``state``
    (``state.position`` is then the end of the valid prefix).
    """
    if chunk_size is None:
        chunk_size = SCAN_CHUNK_SIZE  # read at call time (tests shrink it)
    walk = BatchWalk(
        fd,
        state.position,
        end,
        max_batch_size=max_batch_size,
        chunk_size=chunk_size,
        reuse_buffer=True,
        progress=progress,
    )
    last_offset: int | None = None

    def fail(message: str, position: int, offset: int | None) -> None:
        state.error, state.error_position, state.error_offset = message, position, offset

    try:
        for file_pos, header, buf in walk:
            assert buf is not None  # no hold_bound: every entry is held
            if verify_crc:
                computed = header.compute_crc(buf)
                if computed != header.crc:
                    fail(
                        f"record is corrupt (stored crc = {header.crc}, "
                        f"computed crc = {computed})",
                        file_pos,
                        _offset_field(buf, header.position),
                    )
                    return
            first = header.base_offset
            if expected_min_offset is not None:
                low = first if first is not None else header.last_offset
                if low < expected_min_offset:
                    fail(
                        f"offset {low} is below the segment's base offset "
                        f"{expected_min_offset}",
                        file_pos,
                        _offset_field(buf, header.position),
                    )
                    return
                if header.last_offset - expected_min_offset > INT32_MAX:
                    fail(
                        f"offset {header.last_offset} overflows the relative offsets of a "
                        f"segment with base offset {expected_min_offset}",
                        file_pos,
                        _offset_field(buf, header.position),
                    )
                    state.overflow_offset = header.last_offset
                    return
            if last_offset is not None and header.last_offset <= last_offset:
                fail(
                    f"out of order offsets: last offset {header.last_offset} is not larger "
                    f"than the previous batch's last offset {last_offset}",
                    file_pos,
                    _offset_field(buf, header.position),
                )
                return
            last_offset = header.last_offset
            yield file_pos, header, buf[header.position : header.end]
        stop = walk.stop
        if stop is not None:
            fail(stop.reason, stop.position, stop.offset_field)
    finally:
        # An entry refused above (or a caller that stopped) leaves the walk at its start.
        state.position = walk.position


def _offset_field(buf: memoryview | bytes | bytearray, position: int) -> int | None:
    if len(buf) - position >= 8:
        value: int = _INT64.unpack_from(buf, position)[0]
        return value
    return None


def scan_segment(
    log_path: Path,
    *,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    verify_crc: bool = True,
    start_position: int = 0,
    expected_min_offset: int | None = None,
    progress: Callable[[int], None] | None = None,
    on_batch: BatchCallback | None = None,
) -> SegmentScan:
    """Validate a .log file from ``start_position`` without writing anything.

    Each entry is checked as recovery does: length within [14, max_batch_size], known
    magic, whole (a torn tail is invalid: "truncated batch: N bytes of M"), CRC (unless
    ``verify_crc`` is False), last offsets strictly increasing, and with
    ``expected_min_offset`` (the segment's base offset) no offset below it nor more than
    Int.MaxValue above it. A zero-filled tail shows up as a too-small record size.
    ``progress`` is called with the number of bytes just read (increments summing to the
    bytes examined). Memory is one chunk (8 MiB) plus, at most, one batch bigger than it.
    ``on_batch(position, header, entry_bytes)`` sees each valid entry as it is read (the
    bytes are valid during the call only), so a caller's own checks of the entries cost
    no second read (the audit's record and index checks).
    """
    return _scan(
        log_path,
        max_batch_size=max_batch_size,
        verify_crc=verify_crc,
        start_position=start_position,
        expected_min_offset=expected_min_offset,
        progress=progress,
        on_batch=on_batch,
    )[0]


def _scan(
    log_path: Path,
    *,
    max_batch_size: int,
    verify_crc: bool,
    start_position: int,
    expected_min_offset: int | None,
    progress: Callable[[int], None] | None,
    on_batch: BatchCallback | None = None,
) -> tuple[SegmentScan, int | None]:
    """scan_segment, plus the offending offset when the scan stopped at an offset overflow."""
    log_path = Path(log_path)
    fd = os.open(log_path, os.O_RDONLY)
    try:
        file_size = os.fstat(fd).st_size
        start = min(max(start_position, 0), file_size)
        state = _ScanState(position=start)
        batches = records = 0
        first_offset: int | None = None
        last_offset: int | None = None
        max_timestamp = NO_TIMESTAMP
        offset_of_max = -1
        for position, header, entry in _iter_file_batches(
            fd,
            state,
            file_size,
            max_batch_size=max_batch_size,
            verify_crc=verify_crc,
            expected_min_offset=expected_min_offset,
            progress=progress,
        ):
            if batches == 0:
                first_offset = header.base_offset
            batches += 1
            records += header.records_count or 0
            last_offset = header.last_offset
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
            if on_batch is not None:
                on_batch(position, header, entry)
    finally:
        os.close(fd)
    scan = SegmentScan(
        file_size=file_size,
        valid_bytes=state.position,
        batches=batches,
        records=records,
        first_offset=first_offset,
        last_offset=last_offset,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max,
        error=state.error,
        error_position=state.error_position,
        error_offset=state.error_offset,
    )
    return scan, state.overflow_offset


# -- index rebuilding -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexRebuild:
    """What ``rebuild_indexes`` wrote."""

    offset_index_entries: int
    time_index_entries: int
    valid_bytes: int
    batches: int
    max_timestamp: int
    offset_of_max_timestamp: int
    last_offset: int | None
    # The first offset index entry from which every batch has its own entry, in order
    # (see LogSegment._chained_from).
    chained_from: int = 0


BatchCallback = Callable[[int, BatchHeader, memoryview], None]


def rebuild_indexes(
    log_path: Path,
    base_offset: int,
    *,
    valid_bytes: int | None = None,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    on_batch: BatchCallback | None = None,
) -> IndexRebuild:
    """Write fresh .index and .timeindex files for the first ``valid_bytes`` of a .log.

    Kafka's recovery rules: an offset index entry (the batch's last offset -> the batch's
    position) whenever more than ``index_interval_bytes`` were walked since the previous
    entry, a time index entry there when the max timestamp grew, and a final time index
    entry for the segment's max timestamp. The files are trimmed to their entries (the
    segment grows them back when it becomes active). An index that would exceed
    ``max_index_size`` simply stops gaining entries: it stays correct, only sparser.

    With ``valid_bytes=None`` the log is scanned first (CRCs included) to find its valid
    prefix. Entries are otherwise not re-validated: callers pass what ``scan_segment``
    reported. ``on_batch(position, header, entry_bytes)`` sees every batch (recovery
    uses it to rebuild producer state and leader epochs in the same pass).
    """
    log_path = Path(log_path)
    if valid_bytes is None:
        valid_bytes = scan_segment(
            log_path, max_batch_size=max_batch_size, expected_min_offset=base_offset
        ).valid_bytes
    directory = log_path.parent
    index_path = offset_index_file_path(directory, base_offset)
    time_path = time_index_file_path(directory, base_offset)
    index_tmp = index_path.with_name(index_path.name + TMP_FILE_SUFFIX)
    time_tmp = time_path.with_name(time_path.name + TMP_FILE_SUFFIX)
    for stale in (index_tmp, time_tmp):
        stale.unlink(missing_ok=True)

    offset_index = OffsetIndex(index_tmp, base_offset, max_index_size)
    time_index = TimeIndex(time_tmp, base_offset, max_index_size)
    batches = 0
    max_timestamp, offset_of_max = NO_TIMESTAMP, -1
    last_offset: int | None = None
    state = _ScanState(position=0)
    try:
        fd = os.open(log_path, os.O_RDONLY)
        try:
            end = min(valid_bytes, os.fstat(fd).st_size)
            last_index_entry = 0
            chained_from = 0
            for position, header, entry in _iter_file_batches(
                fd,
                state,
                end,
                max_batch_size=max_batch_size,
                verify_crc=False,
                expected_min_offset=None,
            ):
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
                indexed = False
                if position - last_index_entry > index_interval_bytes:
                    if not offset_index.is_full:
                        offset_index.append(header.last_offset, position)
                        indexed = True
                    if not time_index.is_full:
                        time_index.maybe_append(max_timestamp, offset_of_max)
                    last_index_entry = position
                if not indexed:
                    chained_from = offset_index.entries
                if on_batch is not None:
                    on_batch(position, header, entry)
                batches += 1
                last_offset = header.last_offset
        finally:
            os.close(fd)
        if state.error is not None:
            raise CorruptRecordError(
                f"{log_path}: invalid bytes at position {state.error_position} inside the "
                f"{valid_bytes} bytes said to be valid: {state.error}"
            )
        time_index.maybe_append(max_timestamp, offset_of_max, skip_full_check=True)
        offset_entries, time_entries = offset_index.entries, time_index.entries
        offset_index.close()  # trims and flushes
        time_index.close()
        os.replace(index_tmp, index_path)
        os.replace(time_tmp, time_path)
    except BaseException:
        offset_index.close_handler()
        time_index.close_handler()
        index_tmp.unlink(missing_ok=True)
        time_tmp.unlink(missing_ok=True)
        raise
    return IndexRebuild(
        offset_index_entries=offset_entries,
        time_index_entries=time_entries,
        valid_bytes=state.position,
        batches=batches,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max,
        last_offset=last_offset,
        chained_from=chained_from,
    )
