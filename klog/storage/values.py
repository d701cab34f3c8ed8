"""The small values the log's read and roll paths hand around (Kafka's value objects).

This module owns ``LogOffsetMetadata`` (an offset and where it sits), ``LogOffsetPosition``
(the batch holding an offset), ``TimestampAndOffset`` (a ListOffsets answer),
``FetchDataInfo`` (whole batches of a segment as a file region, read with ``sendfile`` or
``readinto``) and ``RollParams`` (what a segment roll weighs). They hold no locks and own no
files: a ``FetchDataInfo`` borrows its segment's descriptor.

segment.py installs the C ``FetchDataInfo.readinto`` (klog/storage/_fastread.c) when it is
imported; ``FetchDataInfo.readinto`` as written here is the reference the C method falls
back to.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from klog.storage.index import AbortedTxn
from klog.storage.walk import read_fully

_T = TypeVar("_T")


class LogOffsetMetadata(NamedTuple):
    """An offset and where it sits (Kafka's LogOffsetMetadata)."""

    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1


class LogOffsetPosition(NamedTuple):
    """The batch holding an offset: its last offset, file position and size."""

    offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A ListOffsets answer: a timestamp, an offset and the leader epoch of its batch."""

    timestamp: int
    offset: int
    leader_epoch: int | None = None


@dataclass(slots=True)
class FetchDataInfo:
    """Whole batches of a segment as a file region (Kafka's FetchDataInfo).

    ``fd`` is the segment's open descriptor for ``sendfile``; it stays valid while the
    segment is open, and a deleted segment stays open for ``file.delete.delay.ms`` after
    its deletion was scheduled, which is what makes serving a region read just before a
    deletion safe. ``size`` is 0 when nothing fits (then ``first_entry_incomplete`` says
    whether the first batch was bigger than the allowed size).
    """

    fetch_offset_metadata: LogOffsetMetadata
    path: Path | None = None
    fd: int | None = None
    position: int = 0
    size: int = 0
    first_entry_incomplete: bool = False
    aborted_transactions: list[AbortedTxn] | None = None
    # The last offset of the last batch in the region (-1 when empty): a sequential
    # reader's next fetch offset is last_offset + 1, without parsing the region.
    last_offset: int = -1

    def read_bytes(self) -> bytes:
        """The region's bytes (one copy: for tests, tools and non-sendfile transports)."""
        if self.size == 0:
            return b""
        return self._with_fd(lambda fd: _pread_fully(fd, self.size, self.position))

    def readinto(self, buf: bytearray | memoryview) -> int:
        """Read the region into the start of ``buf`` (at least ``size`` bytes); the number of
        bytes read, as io's readinto (fewer than ``size`` only if the file was cut short)."""
        size = self.size
        region = memoryview(buf)[:size]
        if len(region) < size:
            raise ValueError(f"buffer of {len(region)} bytes for a region of {size}")
        fd = self.fd
        if fd is not None and size:
            # The usual case in one system call; _with_fd covers the rest.
            try:
                got = os.preadv(fd, [region], self.position)
            except OSError:
                pass
            else:
                if got == size or not got:
                    return got
                return got + read_fully(fd, region[got:], self.position + got)
        if size == 0:
            return 0
        return self._with_fd(lambda fd: read_fully(fd, region, self.position))

    def _with_fd(self, read: Callable[[int], _T]) -> _T:
        if self.fd is not None:
            try:
                return read(self.fd)
            except OSError:
                if self.path is None:
                    raise
        assert self.path is not None
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return read(fd)
        finally:
            os.close(fd)


_new_object = object.__new__


def _region(
    metadata: LogOffsetMetadata, path: Path, fd: int | None, position: int, size: int, last: int
) -> FetchDataInfo:
    """A FetchDataInfo of ``size`` bytes: the read path's constructor, without the
    dataclass __init__ frame (one per fetch). Sets every field (tests check)."""
    info = _new_object(FetchDataInfo)
    info.fetch_offset_metadata = metadata
    info.path = path
    info.fd = fd
    info.position = position
    info.size = size
    info.first_entry_incomplete = False
    info.aborted_transactions = None
    info.last_offset = last
    return info


def _pread_fully(fd: int, size: int, position: int) -> bytes:
    # os.pread allocates the result and reads into it: one copy, kernel to user.
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class RollParams(NamedTuple):
    """What ``LogSegment.should_roll`` weighs (Kafka's RollParams)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int
