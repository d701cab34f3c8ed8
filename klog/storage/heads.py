"""The read path's walk over a segment's batch headers: a few fields by ``os.pread``.

``LogSegment`` (segment.py) finds batches for reads, offset and timestamp lookups, the
log end offset and truncation by reading only the headers of the batches it passes, never
their records: ``peek`` parses the fields it needs from at most 61 bytes, ``iter_peeks``
walks them one pread each, ``iter_batches`` walks runs of small batches from one buffered
pread (``WALK_CHUNK`` bytes) and ``head_at`` reads one v2 header. The segment was checked
when it was loaded (recovery, ``scan.py``), so a header that cannot be right raises
CorruptRecordError rather than being skipped; a partial batch at the end of the file (a
write in progress) ends a walk quietly.

Functions of a descriptor that the segment owns (never closed or moved here) and of
``path`` (for messages); no state. The callers' lock (the partition's) covers them.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    LAST_OFFSET_DELTA_OFFSET,
    LEGACY_RECORD_OVERHEAD_V0,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    V2_OFFSETS_HEAD,
)

_LOG_OVERHEAD = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

# Offset field, length and magic are where every format has them; lastOffsetDelta (v2)
# ends at byte 27. Runs of small batches are walked from one pread of WALK_CHUNK bytes;
# after a big batch only the next header is read.
WALK_HEAD_SIZE = V2_OFFSETS_HEAD.size
WALK_CHUNK = 8192


class Peek(NamedTuple):
    """The few header fields the read path needs, from one pread of <= 61 bytes."""

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    partition_leader_epoch: int

    @property
    def end(self) -> int:
        return self.position + self.size


def peek(fd: int, path: Path, position: int, end: int) -> Peek | None:
    """Parse the header at ``position`` from at most 61 bytes; None at a clean end.

    Only the fields the read path needs are read (offset fields and timestamps at
    batch.py's positions); a header that cannot be right raises CorruptRecordError,
    since the segment was validated when it was loaded.
    """
    if end - position < LOG_OVERHEAD:
        return None
    head = os.pread(fd, min(RECORD_BATCH_OVERHEAD, end - position), position)
    if len(head) < LOG_OVERHEAD:
        return None
    offset, length = _LOG_OVERHEAD.unpack_from(head)
    size = length + LOG_OVERHEAD
    if length < LEGACY_RECORD_OVERHEAD_V0 or position + size > end:
        if position + size > end and length >= LEGACY_RECORD_OVERHEAD_V0:
            return None  # a partial batch (cannot happen after recovery)
        raise CorruptRecordError(
            f"invalid batch length {length} at position {position} of {path}"
        )
    magic = head[MAGIC_OFFSET] if len(head) > MAGIC_OFFSET else -1
    if magic == MAGIC_V2 and len(head) >= RECORD_BATCH_OVERHEAD:
        (last_delta,) = _INT32.unpack_from(head, LAST_OFFSET_DELTA_OFFSET)
        (max_ts,) = _INT64.unpack_from(head, MAX_TIMESTAMP_OFFSET)
        (epoch,) = _INT32.unpack_from(head, PARTITION_LEADER_EPOCH_OFFSET)
        return Peek(position, size, magic, offset, offset + last_delta, max_ts, epoch)
    if magic in (0, MAGIC_V1):
        ts = NO_TIMESTAMP
        if magic == MAGIC_V1 and len(head) >= LEGACY_TIMESTAMP_OFFSET + 8:
            (ts,) = _INT64.unpack_from(head, LEGACY_TIMESTAMP_OFFSET)
        # A legacy entry's offset is its (wrapper's: last inner) offset.
        return Peek(position, size, magic, offset, offset, ts, NO_PARTITION_LEADER_EPOCH)
    raise CorruptRecordError(f"unknown magic {magic} at position {position} of {path}")


def iter_peeks(fd: int, path: Path, position: int, end: int) -> Iterator[Peek]:
    """``peek`` after ``peek`` from ``position`` until ``end`` (or a partial batch)."""
    while position < end:
        found = peek(fd, path, position, end)
        if found is None:
            return
        yield found
        position = found.end


def iter_batches(
    fd: int, path: Path, position: int, end: int, file_end: int, small: bool = False
) -> Iterator[tuple[int, int, int, int]]:
    """(position, size, last offset, base offset) of each whole batch that starts in
    [position, end), ``position`` being a batch start; the batch that crosses ``end``
    is the last one yielded. Base offset is -1 for v0/v1 entries (a wrapper's first
    offset is not in its header). Stops quietly at a partial batch at the end of the
    file (``file_end``; cannot happen after recovery); a header that cannot be right
    raises CorruptRecordError. Headers come from buffered preads (see WALK_CHUNK); with
    ``small`` the first read fetches one header only (big batches expected).
    """
    if end > file_end:
        end = file_end
    chunk = WALK_HEAD_SIZE if small else WALK_CHUNK
    unpack_head = _LOG_OVERHEAD.unpack_from
    unpack_delta = _INT32.unpack_from
    while position < end:
        want = end - position + WALK_HEAD_SIZE
        if want > chunk:
            want = chunk
        if want > file_end - position:
            want = file_end - position
        data = os.pread(fd, want, position)
        n = len(data)
        i = 0
        size = 0
        while n - i > MAGIC_OFFSET:
            offset, length = unpack_head(data, i)
            at = position + i
            size = length + LOG_OVERHEAD
            if length < LEGACY_RECORD_OVERHEAD_V0:
                raise CorruptRecordError(
                    f"invalid batch length {length} at position {at} of {path}"
                )
            if at + size > file_end:
                return  # a partial batch
            magic = data[i + MAGIC_OFFSET]
            if magic == MAGIC_V2:
                if size < RECORD_BATCH_OVERHEAD:
                    raise CorruptRecordError(
                        f"invalid batch length {length} at position {at} of {path}"
                    )
                if n - i < WALK_HEAD_SIZE:
                    break
                last = offset + unpack_delta(data, i + LAST_OFFSET_DELTA_OFFSET)[0]
                base = offset
            elif magic == 0 or magic == MAGIC_V1:
                last = offset  # a legacy entry's offset is its (wrapper's: last inner)
                base = -1
            else:
                raise CorruptRecordError(f"unknown magic {magic} at position {at} of {path}")
            yield at, size, last, base
            i += size
            if at + size >= end:
                return
        if i == 0:
            return  # fewer header bytes than a header before the end of the file
        position += i
        # After a batch bigger than a chunk, the next header is all a read can use.
        chunk = WALK_HEAD_SIZE if size >= WALK_CHUNK else WALK_CHUNK


def head_at(fd: int, path: Path, position: int, file_end: int) -> tuple[int, int, int] | None:
    """(size, last offset, base offset) of the batch at ``position`` from one small pread
    (v2); other formats and odd cases go through iter_batches."""
    head = os.pread(fd, WALK_HEAD_SIZE, position)
    if len(head) == WALK_HEAD_SIZE and head[MAGIC_OFFSET] == MAGIC_V2:
        offset, length, delta = V2_OFFSETS_HEAD.unpack(head)
        size = length + LOG_OVERHEAD
        if size >= RECORD_BATCH_OVERHEAD and position + size <= file_end:
            return size, offset + delta, offset
    for _at, size, last, base in iter_batches(fd, path, position, position + 1, file_end, True):
        return size, last, base
    return None
