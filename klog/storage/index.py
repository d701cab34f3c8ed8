"""Sparse segment indexes in Kafka's on-disk format: .index, .timeindex and .txnindex.

This module owns the three per-segment index files. They are accelerators, never the
source of truth: a crash may leave them stale or zero-filled, so every reader treats them
as rebuildable (see ``LogSegment.recover`` and ``scan.rebuild_indexes``).

Formats (big-endian, as Kafka's OffsetIndex / TimeIndex / TransactionIndex write them)::

    .index       8-byte entries:  relativeOffset int32, position int32
    .timeindex  12-byte entries:  timestamp int64, relativeOffset int32
    .txnindex   34-byte entries:  version int16 (0), producerId int64, firstOffset int64,
                                  lastOffset int64, lastStableOffset int64

Offset and time indexes are memory-mapped and, while writable, preallocated to
``segment.index.bytes`` rounded down to a whole number of entries (a sparse file); they are
trimmed to their valid entries when the segment is closed or rolled. An index opened from
an existing file counts ``file size / entry size`` entries, exactly like Kafka: a file left
preallocated by a crash therefore ends in zero entries, which ``sanity_check`` detects
(entries must strictly increase).

Lookups use Kafka's "warm section" binary search: the last 8192 bytes of entries are
searched first, because in-sync consumers and followers almost always look there and those
pages stay in the page cache. Memory is the mapping only (the page cache's business), so an
index's Python footprint does not grow with its size.

Descriptors: a mapping holds no file descriptor, as a Java MappedByteBuffer does not (Kafka
closes the index's channel once it is mapped). CPython's mmap keeps a dup of the descriptor
it was given for ``size()`` and ``resize()``, which klog never calls (a resize unmaps and maps
again); on Python 3.13+ ``trackfd=False`` says so, and before that ``map_file`` closes the
dup itself (see ``_untrack``). Without this every mapped index costs a descriptor, and a
broker with thousands of partitions runs out of them ("Too many open files") at start-up.

The offset index's two columns are searched by ``bisect`` in C, not by a Python loop: the
mapping is viewed as native uint32 words, each column is a strided view of them, and
``socket.ntohl`` (a C function, the identity on big-endian hosts) turns a word back into
the big-endian value the file holds. Both columns are non-negative int32, so the order is
right. The views pin the mapping, so they are released before every unmap.

``LogSegment`` reads a few fields of its indexes directly on the produce and fetch paths
(``_entries``, ``_max_entries``, ``_mmap``, ``_columns``, ``_last_entry``), where a property
call per field is a measurable share of the work, and writes an offset index entry itself
(``_last_offset`` too) once ``OffsetIndex.append``'s checks hold; they keep the meanings
given here.

Locking: an index is not thread-safe. Its owning ``LogSegment`` is guarded by the
``PartitionLog`` lock, which serialises every call (reads included, because a resize
remaps the file).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import struct
import sys
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from socket import ntohl as _be32  # not networking: a C byte swap for the bisect key
from typing import ClassVar, NamedTuple

from klog.storage.index_entries import (
    ABORTED_TXN_ENTRY,
    OFFSET_ENTRY,
    TIME_ENTRY,
    IndexShape,
    offset_index_entries,
    offset_index_shape,
    time_index_entries,
    time_index_shape,
    txn_index_shape,
)
from klog.storage.index_entries import (
    ABORTED_TXN_SIZE as ABORTED_TXN_SIZE,
)
from klog.storage.index_entries import (
    ABORTED_TXN_VERSION as ABORTED_TXN_VERSION,
)
from klog.storage.index_entries import (
    OFFSET_INDEX_ENTRY_SIZE as OFFSET_INDEX_ENTRY_SIZE,
)
from klog.storage.index_entries import (
    TIME_INDEX_ENTRY_SIZE as TIME_INDEX_ENTRY_SIZE,
)

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes: an offset index entry this often
WARM_SECTION_BYTES = 8192  # Kafka's AbstractIndex warm section
INT32_MAX = 2**31 - 1
NO_TIMESTAMP = -1

_OFFSET_ENTRY = OFFSET_ENTRY
# Two consecutive offset index entries in one unpack (the read path's check of a guess).
OFFSET_ENTRY_PAIR = struct.Struct(">iiii")
_TIME_ENTRY = TIME_ENTRY
_ABORTED_TXN = ABORTED_TXN_ENTRY

# Bound on bytes held in memory when a whole index file is checked or listed.
_CHUNK_ENTRIES = 65536
# Offset index entries in the warm section.
_WARM_ENTRIES = WARM_SECTION_BYTES // OFFSET_INDEX_ENTRY_SIZE


# -- descriptor-free mappings ------------------------------------------------------------------

# Python 3.13 added mmap(..., trackfd=False): the mapping keeps no descriptor.
_HAS_TRACKFD = sys.version_info >= (3, 13)
# Before 3.13, CPython's mmap_object (Modules/mmapmodule.c, POSIX) is PyObject_HEAD, then
# data, size, pos, offset and exports (five 8-byte fields on 64-bit), then ``int fd``: the
# dup it keeps. object.__basicsize__ is PyObject_HEAD's size in this build (debug builds
# with Py_TRACE_REFS have a bigger one).
_MMAP_FD_OFFSET = object.__basicsize__ + 5 * 8
_untrack_verified = sys.implementation.name == "cpython" and ctypes.sizeof(ctypes.c_void_p) == 8


def map_file(fd: int, length: int, access: int) -> mmap.mmap:
    """Map ``length`` bytes of ``fd``'s file; the mapping holds no descriptor of its own
    when the running Python allows it (``fd`` may be closed at once either way)."""
    if _HAS_TRACKFD:
        # trackfd is new in Python 3.13; typeshed for 3.11 (our python_version) lacks it.
        return mmap.mmap(fd, length, access=access, trackfd=False)  # type: ignore[call-arg]
    mapping = mmap.mmap(fd, length, access=access)
    _untrack(mapping, fd)
    return mapping


def _untrack(mapping: mmap.mmap, fd: int) -> None:
    """Close the descriptor CPython < 3.13 keeps for ``mapping`` and mark it gone (-1, as
    for an anonymous map: close, flush and the buffer protocol never use it).

    Done only when the field holds what it must -- a descriptor other than ``fd`` open on
    the same file -- so an unexpected object layout is never written to: then the mapping
    keeps its descriptor (correct, one descriptor per mapped index) from then on.
    """
    global _untrack_verified
    if not _untrack_verified:
        return
    cell = ctypes.c_int.from_address(id(mapping) + _MMAP_FD_OFFSET)
    kept = cell.value
    try:
        same = kept >= 0 and kept != fd and os.path.samestat(os.fstat(kept), os.fstat(fd))
    except OSError:
        same = False
    if not same:
        _untrack_verified = False
        return
    cell.value = -1
    os.close(kept)


class CorruptIndexError(Exception):
    """An index file that fails a sanity check; it must be rebuilt from the log."""


class IndexOffsetOverflowError(ValueError):
    """An offset that does not fit in an int32 relative to the segment's base offset."""


class InvalidIndexAppendError(ValueError):
    """An append that would break the index's ordering (Kafka's InvalidOffsetException)."""


class OffsetPosition(NamedTuple):
    """An offset index entry: an absolute offset and the file position of its batch."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry: a timestamp and the absolute offset it was reached at."""

    timestamp: int
    offset: int


def round_down_to_entry(size: int, entry_size: int) -> int:
    return entry_size * (size // entry_size)


class _MmapIndex:
    """Shared mechanics of the offset and time index: mapping, resizing, searching."""

    # The attributes klog/storage/_fastread.c reads, as slots (it reads them at fixed
    # offsets); everything else lives in the instance dict as usual.
    __slots__ = ("__dict__", "__weakref__", "_entries", "_mmap")

    entry_size: ClassVar[int]
    kind: ClassVar[str]
    _entry_struct: ClassVar[struct.Struct]
    # The relative offset of the entry in a slot (each index's _field_reader of its column).
    _relative: ClassVar[Callable[[_MmapIndex, int], int]]

    def __init__(
        self,
        path: Path | str,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
    ) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._mmap: mmap.mmap | None = None
        # (offset column, position column, words, whole map): OffsetIndex's search views.
        self._columns: tuple[memoryview, memoryview, memoryview, memoryview] | None = None
        newly_created = not self.path.exists()
        if newly_created and not writable:
            raise FileNotFoundError(f"{self.kind} file {self.path} does not exist")
        if newly_created and max_index_size < self.entry_size:
            raise ValueError(f"invalid max index size {max_index_size}")
        fd = os.open(self.path, (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY, 0o644)
        try:
            if newly_created:
                os.ftruncate(fd, round_down_to_entry(max_index_size, self.entry_size))
            self._length = os.fstat(fd).st_size
            self._map(fd, self._length)
        finally:
            os.close(fd)
        self._max_entries = self._length // self.entry_size
        # An existing file is trusted to be full of entries (Kafka does the same);
        # sanity_check() is what tells a clean file from a crashed preallocated one.
        self._entries = 0 if newly_created else self._max_entries
        self._after_load()

    # -- mapping -------------------------------------------------------------------------

    def _map(self, fd: int, length: int) -> None:
        if length == 0:
            self._mmap = None  # mmap refuses empty files; an empty index needs no map
            return
        access = mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ
        self._mmap = map_file(fd, length, access)

    def _unmap(self) -> None:
        columns = self._columns
        if columns is not None:
            # Views pin the mapping: release them (derived views first) before closing it.
            self._columns = None
            for view in columns:
                view.release()
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def _after_load(self) -> None:
        """Hook for subclasses to cache their last entry."""

    # -- properties ----------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def length(self) -> int:
        """Current size of the file in bytes (preallocated space included)."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by valid entries."""
        return self._entries * self.entry_size

    @property
    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    def relative_offset(self, offset: int) -> int:
        relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            raise IndexOffsetOverflowError(f"integer overflow for offset {offset} ({self.path})")
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # -- file lifecycle ------------------------------------------------------------------

    def resize(self, new_size: int) -> bool:
        """Set the file (and mapping) size to ``new_size`` rounded down to whole entries."""
        rounded = round_down_to_entry(new_size, self.entry_size)
        if rounded == self._length:
            return False
        if not self.writable:
            raise PermissionError(f"{self.kind} {self.path} is read-only")
        self._unmap()
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, rounded)
            self._length = rounded
            self._map(fd, rounded)
        finally:
            os.close(fd)
        self._max_entries = rounded // self.entry_size
        self._entries = min(self._entries, self._max_entries)
        return True

    def trim_to_valid_size(self) -> None:
        if self.writable:
            self.resize(self.size_in_bytes)

    def flush(self) -> None:
        if self._mmap is not None and self.writable:
            self._mmap.flush()

    def close_handler(self) -> None:
        """Release the mapping without touching the file."""
        self._unmap()

    def close(self) -> None:
        """Trim to the valid entries (so the file holds no zero tail) and unmap."""
        if self.writable and self.path.exists():
            self.trim_to_valid_size()
            self.flush()
        self._unmap()

    def delete_if_exists(self) -> bool:
        self._unmap()
        return _unlink_if_exists(self.path)

    def rename_to(self, new_path: Path) -> None:
        try:
            os.replace(self.path, new_path)
        finally:
            self.path = Path(new_path)

    def reset(self) -> None:
        """Drop every entry and grow back to the maximum size (ready for rebuilding)."""
        self._truncate_to_entries(0)
        self.resize(self.max_index_size)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        relative = offset - self.base_offset
        slot = self._slot_for(relative, self._relative, False)
        if slot < 0:
            new_entries = 0
        elif self._relative(slot) == relative:
            new_entries = slot
        else:
            new_entries = slot + 1
        self._truncate_to_entries(new_entries)

    def truncate(self) -> None:
        self._truncate_to_entries(0)

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = entries
        self._after_load()

    # -- searching -----------------------------------------------------------------------

    def _slot_for(self, target: int, key: Callable[[int], int], smallest_upper: bool) -> int:
        """Kafka's indexSlotRangeFor: warm section first, then the cold part.

        Returns the slot of the largest entry whose key <= target (or -1), or with
        ``smallest_upper`` the slot of the smallest entry whose key >= target (or -1).
        """
        entries = self._entries
        if entries == 0:
            return -1
        first_hot = max(0, entries - 1 - WARM_SECTION_BYTES // self.entry_size)
        if key(first_hot) < target:
            return self._binary_search(target, key, smallest_upper, first_hot, entries - 1)
        if key(0) > target:
            return 0 if smallest_upper else -1
        return self._binary_search(target, key, smallest_upper, 0, first_hot)

    def _binary_search(
        self, target: int, key: Callable[[int], int], smallest_upper: bool, lo: int, hi: int
    ) -> int:
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            found = key(mid)
            if found > target:
                hi = mid - 1
            elif found < target:
                lo = mid
            else:
                return mid
        if not smallest_upper:
            return lo
        # lo is the largest slot below target; the next one (if any) is the upper bound.
        if key(lo) >= target:
            return lo
        return -1 if lo == self._entries - 1 else lo + 1

    def _check_writable(self) -> mmap.mmap:
        if not self.writable or self._mmap is None:
            raise PermissionError(f"{self.kind} {self.path} is not open for writing")
        return self._mmap

    def shape(self) -> IndexShape:
        """How far the file's entries obey index_entries.py's rules (the one rule set of
        a sound index: this class's ``sanity_check``, the audit and dump-segment ask it)."""
        if self._mmap is None:
            return self._shape_of(b"")
        # The valid entries only: a writable index's preallocated room is not its content.
        view = memoryview(self._mmap)[: self._entries * self.entry_size]
        try:
            return self._shape_of(view)
        finally:
            view.release()  # an exported view would pin the mapping

    def _shape_of(self, data: memoryview | bytes) -> IndexShape:
        raise NotImplementedError

    def _iter_raw(self, struct_: struct.Struct) -> Iterator[tuple[int, ...]]:
        """All valid entries as raw tuples, read in bounded chunks."""
        if self._mmap is None:
            return
        step = _CHUNK_ENTRIES * self.entry_size
        end = self._entries * self.entry_size
        for start in range(0, end, step):
            chunk = self._mmap[start : min(end, start + step)]
            yield from struct_.iter_unpack(chunk)


    def _stored_entry(self, n: int) -> tuple[int, int]:
        """Entry ``n``'s two fields as stored (IndexError outside the valid entries)."""
        if n < 0 or n >= self._entries:
            raise IndexError(f"attempt to fetch entry {n} of {self.kind} with {self._entries}")
        assert self._mmap is not None
        fields: tuple[int, int] = self._entry_struct.unpack_from(self._mmap, n * self.entry_size)
        return fields


def _unlink_if_exists(path: Path) -> bool:
    """Delete the file; False when there was none."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _field_reader(entry: struct.Struct, column: int) -> Callable[[_MmapIndex, int], int]:
    """A method reading one field of the entry in a slot: the binary search's key."""
    unpack_from = entry.unpack_from
    size = entry.size

    def field(index: _MmapIndex, slot: int) -> int:
        assert index._mmap is not None
        value: int = unpack_from(index._mmap, slot * size)[column]
        return value

    return field


class OffsetIndex(_MmapIndex):
    """Maps offsets to file positions of the batches that hold them (Kafka's OffsetIndex).

    Entries are (offset - base_offset, position) pairs, both increasing. A lookup returns
    the largest entry whose offset is <= the target; the log is then scanned from its
    position.
    """

    entry_size = OFFSET_INDEX_ENTRY_SIZE
    _entry_struct = _OFFSET_ENTRY
    kind = "offset index"

    def _shape_of(self, data: memoryview | bytes) -> IndexShape:
        return offset_index_shape(data, self.base_offset)

    def _after_load(self) -> None:
        self._last_offset = self.base_offset
        if self._entries > 0:
            self._last_offset = self.entry(self._entries - 1).offset

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when empty."""
        return self._last_offset

    _relative = _field_reader(_OFFSET_ENTRY, 0)
    _position = _field_reader(_OFFSET_ENTRY, 1)

    def entry(self, n: int) -> OffsetPosition:
        relative, position = self._stored_entry(n)
        return OffsetPosition(self.base_offset + relative, position)

    def columns(self) -> tuple[memoryview, memoryview]:
        """(offset column, position column): strided views of the entries as native uint32
        words; ``socket.ntohl(word)`` is the stored value (relative offset or position).

        Valid until the index is resized or closed; the entry count is ``entries``.
        """
        columns = self._columns
        if columns is None:
            if self._mmap is None:
                raise ValueError(f"{self.kind} {self.path} has no mapped entries")
            whole = memoryview(self._mmap)
            words = whole.cast("I")
            columns = self._columns = (words[0::2], words[1::2], words, whole)
        return columns[0], columns[1]

    def _search(self, column: int, target: int) -> int:
        """The slot of the largest entry whose ``column`` value is <= target, or -1.

        Kafka's warm section first (the last 8192 bytes of entries), then the rest; each
        part is bisected in C over a strided view of the mapping.
        """
        entries = self._entries
        if entries == 0:
            return -1
        view = self.columns()[column]
        first_hot = entries - 1 - _WARM_ENTRIES
        if first_hot < 0:
            first_hot = 0
        if _be32(view[first_hot]) < target:
            return bisect_right(view, target, first_hot, entries, key=_be32) - 1
        if _be32(view[0]) > target:
            return -1
        return bisect_right(view, target, 0, first_hot + 1, key=_be32) - 1

    def position_at(self, slot: int) -> int:
        """The position of entry ``slot`` (0 <= slot < entries; unchecked, for hot loops)."""
        return _be32(self.columns()[1][slot])

    def slot_for_offset(self, target_offset: int) -> int:
        """The slot of the largest entry with offset <= ``target_offset``, or -1."""
        return self._search(0, target_offset - self.base_offset)

    def slot_for_position(self, position: int) -> int:
        """The slot of the last entry whose position is <= ``position``, or -1."""
        return self._search(1, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry with offset <= target, or (base_offset, 0) if there is none."""
        slot = self._search(0, target_offset - self.base_offset)
        if slot == -1:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def lookup_by_position(self, position: int) -> OffsetPosition:
        """The last entry whose position is <= ``position`` (or (base_offset, 0))."""
        slot = self._search(1, position)
        if slot == -1:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry at or past ``fetch_offset.position + fetch_size``, if any."""
        slot = self._slot_for(fetch_offset.position + fetch_size, self._position, True)
        return None if slot == -1 else self.entry(slot)

    def append(self, offset: int, position: int) -> None:
        # Runs on the produce path every index.interval.bytes: checks inlined.
        buf = self._mmap
        if buf is None or not self.writable:
            buf = self._check_writable()
        entries = self._entries
        if entries >= self._max_entries:
            raise InvalidIndexAppendError(
                f"attempt to append to a full index (size = {entries}) {self.path}"
            )
        if entries != 0 and offset <= self._last_offset:
            raise InvalidIndexAppendError(
                f"attempt to append an offset ({offset}) to position {entries} no "
                f"larger than the last offset appended ({self._last_offset}) to {self.path}"
            )
        relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            relative = self.relative_offset(offset)  # raises IndexOffsetOverflowError
        _OFFSET_ENTRY.pack_into(buf, entries * OFFSET_INDEX_ENTRY_SIZE, relative, position)
        self._entries = entries + 1
        self._last_offset = offset

    def iter_entries(self) -> Iterator[OffsetPosition]:
        for relative, position in self._iter_raw(_OFFSET_ENTRY):
            yield OffsetPosition(self.base_offset + relative, position)

    def sanity_check(self, log_size: int | None = None) -> None:
        """Raise CorruptIndexError unless the file is a plausible offset index.

        Beyond Kafka's checks (size a multiple of 8, last offset >= base offset) the
        entries must obey index_entries.py's rules: offsets and positions strictly
        increase, which is what rejects the zero-filled tail of an index preallocated
        before a crash; with ``log_size`` the last position must lie inside the log.
        """
        _check_length(self)
        if self._entries == 0:
            return
        last = self.entry(self._entries - 1)
        if last.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index found, index file ({self.path}) has non-zero size but the last "
                f"offset is {last.offset} which is less than the base offset {self.base_offset}"
            )
        if log_size is not None and last.position >= max(log_size, 1):
            raise CorruptIndexError(
                f"corrupt index found, index file ({self.path}) points at position "
                f"{last.position} past the end of the log ({log_size} bytes)"
            )
        shape = self.shape()
        if not shape.sound:
            # "near": the first entry of the chunk of _CHUNK_ENTRIES that holds the fault
            # (one entry before it, after the first chunk: chunks overlap by one).
            chunk = shape.usable // _CHUNK_ENTRIES
            near = chunk * _CHUNK_ENTRIES - 1 if chunk else 0
            raise CorruptIndexError(
                f"corrupt index found, index file ({self.path}) has entries that do not "
                f"increase (near entry {near}); a zero-filled tail means an unclean shutdown"
            )


class TimeIndex(_MmapIndex):
    """Maps timestamps to offsets (Kafka's TimeIndex).

    Entries are (timestamp, offset - base_offset), timestamps strictly increasing: an
    entry is added only when a batch raises the segment's max timestamp. One slot is kept
    in reserve for the final entry written when the segment becomes inactive.
    """

    entry_size = TIME_INDEX_ENTRY_SIZE
    _entry_struct = _TIME_ENTRY
    kind = "time index"

    def _shape_of(self, data: memoryview | bytes) -> IndexShape:
        return time_index_shape(data, self.base_offset)

    def _after_load(self) -> None:
        self._last_entry = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        if self._entries > 0:
            self._last_entry = self.entry(self._entries - 1)

    @property
    def is_full(self) -> bool:
        # Kafka keeps the last slot for maybe_append(..., skip_full_check=True) at roll.
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base_offset) when empty."""
        return self._last_entry

    _timestamp = _field_reader(_TIME_ENTRY, 0)
    _relative = _field_reader(_TIME_ENTRY, 1)

    def entry(self, n: int) -> TimestampOffset:
        timestamp, relative = self._stored_entry(n)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp <= target, or (-1, base_offset) if none."""
        slot = self._slot_for(target_timestamp, self._timestamp, False)
        if slot == -1:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if the timestamp is larger than the last entry's."""
        # Runs on the produce path every index.interval.bytes: checks inlined.
        buf = self._mmap
        if buf is None or not self.writable:
            buf = self._check_writable()
        entries = self._entries
        if not skip_full_check and entries >= self._max_entries - 1:
            raise InvalidIndexAppendError(
                f"attempt to append to a full time index (size = {entries}) {self.path}"
            )
        last_timestamp, last_offset = self._last_entry
        if entries != 0:
            if offset < last_offset:
                raise InvalidIndexAppendError(
                    f"attempt to append an offset ({offset}) to slot {entries} no larger "
                    f"than the last offset appended ({last_offset}) to {self.path}"
                )
            if timestamp < last_timestamp:
                raise InvalidIndexAppendError(
                    f"attempt to append a timestamp ({timestamp}) to slot {entries} no "
                    f"larger than the last timestamp appended ({last_timestamp}) to {self.path}"
                )
        if timestamp <= last_timestamp:
            return False
        if entries >= self._max_entries:
            raise InvalidIndexAppendError(f"time index {self.path} has no room left")
        relative = offset - self.base_offset
        if relative < 0 or relative > INT32_MAX:
            relative = self.relative_offset(offset)  # raises IndexOffsetOverflowError
        _TIME_ENTRY.pack_into(buf, entries * TIME_INDEX_ENTRY_SIZE, timestamp, relative)
        self._entries = entries + 1
        self._last_entry = TimestampOffset(timestamp, offset)
        return True

    def iter_entries(self) -> Iterator[TimestampOffset]:
        for timestamp, relative in self._iter_raw(_TIME_ENTRY):
            yield TimestampOffset(timestamp, self.base_offset + relative)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless the file is a plausible time index.

        Kafka's checks (size a multiple of 12, last timestamp >= first, last offset >=
        base offset) plus: timestamps strictly increase and offsets never decrease, which
        rejects a zero-filled tail.
        """
        _check_length(self)
        if self._entries == 0:
            return
        last = self.entry(self._entries - 1)
        first = self.entry(0)
        if last.timestamp < first.timestamp:
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has non-zero size "
                f"but the last timestamp is {last.timestamp} which is less than the first "
                f"timestamp {first.timestamp}"
            )
        if last.offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has non-zero size "
                f"but the last offset is {last.offset} which is less than the base offset "
                f"{self.base_offset}"
            )
        shape = self.shape()
        if not shape.sound:
            n = shape.usable if shape.unordered is None else shape.unordered
            raise CorruptIndexError(
                f"corrupt time index found, time index file ({self.path}) has entries "
                f"that do not increase (entry {n}); a zero-filled tail means an unclean "
                "shutdown"
            )


def _check_length(index: _MmapIndex) -> None:
    if index.length % index.entry_size != 0:
        raise CorruptIndexError(
            f"{index.kind} file {index.path} is corrupt, found {index.length} bytes which is "
            f"neither positive nor a multiple of {index.entry_size}"
        )


# -- transaction index ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One .txnindex entry: an aborted transaction's offset range (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    def to_bytes(self) -> bytes:
        return _ABORTED_TXN.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def from_bytes(cls, buf: bytes | memoryview, position: int = 0) -> AbortedTxn:
        version, producer_id, first, last, lso = _ABORTED_TXN.unpack_from(buf, position)
        return cls(producer_id, first, last, lso, version)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """Aborted transactions overlapping a fetch; complete when the index said all it knows."""

    aborted_txns: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The aborted transactions of one segment, in lastOffset order (Kafka's TransactionIndex).

    The file is created on the first append (a segment without aborted transactions has
    none), written with plain appends and read in bounded chunks. Not thread-safe: the
    ``PartitionLog`` lock serialises access.
    """

    def __init__(self, path: Path | str, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._last_offset: int | None = None
        if self.path.exists():
            for txn in self.iter_entries():
                self._last_offset = txn.last_offset

    def append(self, txn: AbortedTxn) -> None:
        if self._last_offset is not None and txn.last_offset < self._last_offset:
            raise InvalidIndexAppendError(
                f"the last offset of appended transactions must increase sequentially, but "
                f"{txn.last_offset} is not greater than current last offset "
                f"{self._last_offset} of index {self.path}"
            )
        with open(self.path, "ab") as f:
            f.write(txn.to_bytes())
        self._last_offset = txn.last_offset

    def flush(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def iter_entries(self) -> Iterator[AbortedTxn]:
        """Every whole entry of the file (a partial trailing entry is ignored)."""
        yield from _iter_txn_file(self.path)

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return list(self.iter_entries())

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Aborted transactions that overlap [fetch_offset, upper_bound_offset).

        Complete once an entry's last stable offset reaches the upper bound: no later
        segment can then hold a transaction that matters to this fetch.
        """
        found: list[AbortedTxn] = []
        if self._last_offset is None:
            # No entry (this index writes every one, so it knows): no file access on the
            # path of every read_committed fetch.
            return TxnIndexSearchResult(found, False)
        for txn in self.iter_entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose lastOffset >= ``offset``."""
        if not self.path.exists():
            return
        keep = 0
        last: int | None = None
        for txn in self.iter_entries():
            if txn.last_offset >= offset:
                break
            keep += ABORTED_TXN_SIZE
            last = txn.last_offset
        os.truncate(self.path, keep)
        self._last_offset = last

    def reset(self) -> None:
        if self.path.exists():
            os.truncate(self.path, 0)
        self._last_offset = None

    def sanity_check(self) -> None:
        """Raise CorruptIndexError unless the file obeys index_entries.py's rules for a
        .txnindex (Kafka's: whole entries of version 0, none ending below the base offset;
        and what its appends guarantee: first <= last offset, last offsets in order)."""
        if not self.path.exists():
            return
        size = self.path.stat().st_size
        if size % ABORTED_TXN_SIZE != 0:
            raise CorruptIndexError(
                f"transaction index {self.path} is corrupt: {size} bytes is not a multiple "
                f"of {ABORTED_TXN_SIZE}"
            )
        shape = txn_index_shape(self.path.read_bytes(), self.base_offset)
        if shape.problem is not None:
            raise CorruptIndexError(f"transaction index {self.path} is corrupt: {shape.problem}")

    def close(self) -> None:
        """Nothing stays open between calls."""

    def delete_if_exists(self) -> bool:
        return _unlink_if_exists(self.path)

    def rename_to(self, new_path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, new_path)
        self.path = Path(new_path)


def _iter_txn_file(path: Path) -> Iterator[AbortedTxn]:
    if not path.exists():
        return
    with open(path, "rb") as f:
        step = ABORTED_TXN_SIZE * 1024
        while True:
            chunk = f.read(step)
            whole = len(chunk) - len(chunk) % ABORTED_TXN_SIZE
            for position in range(0, whole, ABORTED_TXN_SIZE):
                yield AbortedTxn.from_bytes(chunk, position)
            if len(chunk) < step:
                return


# -- read-only helpers for tools (dump-segment) ---------------------------------------------


def read_offset_index_entries(path: Path | str, base_offset: int) -> list[tuple[int, int]]:
    """Every raw (absolute offset, position) entry of an .index file, zero tail included
    (a partial trailing entry is left out): index_entries.offset_index_entries of its bytes."""
    return offset_index_entries(Path(path).read_bytes(), base_offset)


def read_time_index_entries(path: Path | str, base_offset: int) -> list[tuple[int, int]]:
    """Every raw (timestamp, absolute offset) entry of a .timeindex file, zero tail included."""
    return time_index_entries(Path(path).read_bytes(), base_offset)


def read_txn_index_entries(path: Path | str) -> list[AbortedTxn]:
    """Every whole entry of a .txnindex file."""
    return list(_iter_txn_file(Path(path)))
