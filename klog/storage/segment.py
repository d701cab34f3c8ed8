"""Log segments in Kafka's on-disk format: one .log file and its three index files.

This module owns a segment's files and the two read-only/offline primitives that every
consumer of a segment file shares:

- ``scan_segment`` walks a .log file from a position in big chunks and validates each
  entry exactly as recovery does (length bounds and magic via ``records.batch``, CRC,
  offsets strictly increasing and within the segment). It reports the first invalid byte
  and never writes. ``klog verify`` / ``klog recover`` and ``LogSegment.recover`` all use it.
- ``rebuild_indexes`` writes fresh .index and .timeindex files for the valid prefix of a
  .log, with Kafka's recovery rules (an entry every ``index.interval.bytes``), through a
  temporary file renamed over the old one, so a crash never leaves half an index.

``LogSegment`` (Kafka's LogSegment) appends whole batches, reads whole batches as file
regions (never decoding records: only the 12/61-byte headers are read, with ``os.pread``),
translates offsets and timestamps through the indexes, truncates and recovers. Its memory
does not depend on the segment's size.

Locking: ``LogSegment`` is not thread-safe; the ``PartitionLog`` lock serialises every call.
The module-level functions hold no state.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    DEFAULT_MAX_BATCH_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
)
from klog.storage.index import (
    DEFAULT_MAX_INDEX_SIZE,
    INT32_MAX,
    OffsetIndex,
    TimeIndex,
)

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
TMP_FILE_SUFFIX = ".tmp"

DEFAULT_INDEX_INTERVAL_BYTES = 4096
SCAN_CHUNK_SIZE = 8 * 1024 * 1024

_LOG_OVERHEAD = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


# -- file names -----------------------------------------------------------------------------


def filename_prefix_from_offset(offset: int) -> str:
    """Kafka's 20-digit, zero-padded base offset that names a segment's files."""
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    """The base offset of a segment file name such as ``00000000000000000042.log.deleted``."""
    prefix = Path(name).name.split(".", 1)[0]
    if not prefix.isdigit():
        raise ValueError(f"{name!r} is not named after a base offset")
    return int(prefix)


def log_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(base_offset)}{LOG_FILE_SUFFIX}{suffix}"


def offset_index_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(base_offset)}{INDEX_FILE_SUFFIX}{suffix}"


def time_index_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    name = f"{filename_prefix_from_offset(base_offset)}{TIME_INDEX_FILE_SUFFIX}{suffix}"
    return directory / name


def txn_index_file_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    name = f"{filename_prefix_from_offset(base_offset)}{TXN_INDEX_FILE_SUFFIX}{suffix}"
    return directory / name


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


class _OffsetOverflow(Exception):
    """Internal: the offset-overflow case of a scan (recovery must not truncate it)."""


@dataclass(slots=True)
class _ScanState:
    position: int
    error: str | None = None
    error_position: int | None = None
    error_offset: int | None = None
    overflow_offset: int | None = None


def _read_fully(fd: int, view: memoryview, position: int) -> int:
    """Fill ``view`` from ``position`` (short only at end of file); return bytes read."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], position + done)
        if n == 0:
            break
        done += n
    return done


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

    Entry bytes are a view into a reusable buffer, valid until the next item. Stops at
    the first invalid byte and records why in ``state`` (``state.position`` is then the
    end of the valid prefix). A batch larger than the chunk is read into its own buffer,
    allocated only after its length was checked against ``max_batch_size`` and the bytes
    left in the file.
    """
    if chunk_size is None:
        chunk_size = SCAN_CHUNK_SIZE  # read at call time (tests shrink it)
    buf = bytearray(max(RECORD_BATCH_OVERHEAD, min(chunk_size, max(end - state.position, 0))))
    view = memoryview(buf)
    last_offset: int | None = None
    # The window holds file bytes [win_start, win_start + win_len).
    win_start = state.position
    win_len = 0

    def fail(message: str, position: int, offset: int | None) -> None:
        state.error, state.error_position, state.error_offset = message, position, offset

    def check(header: BatchHeader, entry_buf: memoryview, file_pos: int) -> bool:
        nonlocal last_offset
        if verify_crc:
            computed = header.compute_crc(entry_buf)
            if computed != header.crc:
                fail(
                    f"record is corrupt (stored crc = {header.crc}, computed crc = {computed})",
                    file_pos,
                    _offset_field(entry_buf, header.position),
                )
                return False
        first = header.base_offset
        if expected_min_offset is not None:
            low = first if first is not None else header.last_offset
            if low < expected_min_offset:
                fail(
                    f"offset {low} is below the segment's base offset {expected_min_offset}",
                    file_pos,
                    _offset_field(entry_buf, header.position),
                )
                return False
            if header.last_offset - expected_min_offset > INT32_MAX:
                fail(
                    f"offset {header.last_offset} overflows the relative offsets of a segment "
                    f"with base offset {expected_min_offset}",
                    file_pos,
                    _offset_field(entry_buf, header.position),
                )
                state.overflow_offset = header.last_offset
                return False
        if last_offset is not None and header.last_offset <= last_offset:
            fail(
                f"out of order offsets: last offset {header.last_offset} is not larger than "
                f"the previous batch's last offset {last_offset}",
                file_pos,
                _offset_field(entry_buf, header.position),
            )
            return False
        last_offset = header.last_offset
        return True

    while state.position < end:
        # Refill the window so that it starts at the next entry.
        keep = win_start + win_len - state.position
        if keep > 0 and state.position != win_start:
            offset_in_win = state.position - win_start
            buf[:keep] = buf[offset_in_win : offset_in_win + keep]
        keep = max(keep, 0)
        want = min(len(buf), end - state.position)
        got = _read_fully(fd, view[keep:want], state.position + keep) if want > keep else 0
        if progress is not None and got:
            progress(got)
        win_start, win_len = state.position, keep + got
        if win_len == 0:
            break
        consumed = 0
        try:
            for header in iter_batch_headers(view, 0, win_len, max_batch_size=max_batch_size):
                file_pos = win_start + header.position
                if not check(header, view, file_pos):
                    return
                yield file_pos, header, view[header.position : header.end]
                consumed = header.end
                state.position = win_start + consumed
        except CorruptRecordError as exc:
            pos = getattr(exc, "position", consumed)
            fail(_strip_position(exc, pos), win_start + pos, _offset_field(view[:win_len], pos))
            return
        if state.position >= end:
            return
        # A partial entry remains at the end of the window.
        partial = win_len - consumed
        # The file may have been shorter than its size said (it shrank under us): what
        # was read is then all there is.
        remaining_in_file = partial if win_len < want else end - state.position
        if partial < LOG_OVERHEAD:
            if partial == remaining_in_file:
                fail(
                    f"truncated batch: {partial} bytes of at least {LOG_OVERHEAD}",
                    state.position,
                    _offset_field(view[:win_len], consumed),
                )
                return
            continue  # the window was just short; refill
        offset_field, length = _LOG_OVERHEAD.unpack_from(view, consumed)
        size = length + LOG_OVERHEAD  # bounds were checked by iter_batch_headers
        if size > remaining_in_file:
            fail(
                f"truncated batch: {remaining_in_file} bytes of {size}",
                state.position,
                offset_field,
            )
            return
        if size <= len(buf):
            continue  # fits in the window once refilled
        # A batch bigger than the chunk: read it whole (size <= max_batch_size + 12 and
        # <= the bytes left in the file, both checked above).
        big = bytearray(size)
        big[:partial] = view[consumed:win_len]
        got = _read_fully(fd, memoryview(big)[partial:], state.position + partial)
        if progress is not None and got:
            progress(got)
        if got != size - partial:
            fail(f"truncated batch: {partial + got} bytes of {size}", state.position, offset_field)
            return
        try:
            header = read_batch_header(big, 0, max_batch_size=max_batch_size)
        except CorruptRecordError as exc:
            fail(_strip_position(exc, 0), state.position, offset_field)
            return
        big_view = memoryview(big)
        if not check(header, big_view, state.position):
            return
        yield state.position, header, big_view
        state.position += size
        win_start, win_len = state.position, 0


def _offset_field(buf: memoryview | bytes | bytearray, position: int) -> int | None:
    if len(buf) - position >= 8:
        return _INT64.unpack_from(buf, position)[0]
    return None


def _strip_position(exc: CorruptRecordError, position: int) -> str:
    # batch.py appends the buffer-relative position; callers report the file position.
    return str(exc).removesuffix(f" at position {position}")


def scan_segment(
    log_path: Path,
    *,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    verify_crc: bool = True,
    start_position: int = 0,
    expected_min_offset: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> SegmentScan:
    """Validate a .log file from ``start_position`` without writing anything.

    Each entry is checked as recovery does: length within [14, max_batch_size], known
    magic, whole (a torn tail is invalid: "truncated batch: N bytes of M"), CRC (unless
    ``verify_crc`` is False), last offsets strictly increasing, and with
    ``expected_min_offset`` (the segment's base offset) no offset below it nor more than
    Int.MaxValue above it. A zero-filled tail shows up as a too-small record size.
    ``progress`` is called with the number of bytes just read (increments summing to the
    bytes examined). Memory is one chunk (8 MiB) plus, at most, one batch bigger than it.
    """
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
        for _pos, header, _entry in _iter_file_batches(
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
    finally:
        os.close(fd)
    return SegmentScan(
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
                if position - last_index_entry > index_interval_bytes:
                    if not offset_index.is_full:
                        offset_index.append(header.last_offset, position)
                    if not time_index.is_full:
                        time_index.maybe_append(max_timestamp, offset_of_max)
                    last_index_entry = position
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
    )
