"""The entries of a segment's index files: their bytes and the rules they obey, once.

Formats (big-endian, as Kafka's OffsetIndex / TimeIndex / TransactionIndex write them)::

    .index       8-byte entries:  relativeOffset int32, position int32
    .timeindex  12-byte entries:  timestamp int64, relativeOffset int32
    .txnindex   34-byte entries:  version int16 (0), producerId int64, firstOffset int64,
                                  lastOffset int64, lastStableOffset int64

The rules are what Kafka appends, so what a sound file holds:

- ``.index``: offsets not below the segment's base offset and positions not negative, both
  strictly increasing (an entry is added only for a later batch);
- ``.timeindex``: timestamps not negative; offsets not below the base offset, never
  decreasing, the base offset in entry 0 only. Timestamps strictly increase (an entry is
  added only when a batch raises the segment's max timestamp), an order kept apart as
  ``IndexShape.unordered``: Kafka's dump tool reports it instead of stopping there;
- ``.txnindex``: version 0, a producer id, 0 <= firstOffset <= lastOffset, last offsets not
  below the base offset (when known) and never decreasing.

Offset and time indexes are preallocated while they are written (``segment.index.bytes``),
and the entries not written yet are zero bytes: the entry (base offset, position 0), or
(timestamp 0, base offset). Entry 0 may hold that value (Kafka's dump tool shows it); a zero
entry after it starts a zero-filled tail, which must run to the end of the file: the room
of an active segment's index, or what a crash left of it. It is not a fault, and its entries
are not entries. A file whose every entry is zero (two or more) holds none.

``offset_index_shape``, ``time_index_shape`` and ``txn_index_shape`` judge a file's bytes by
these rules and say how far it is sound (``IndexShape``). Everything that judges an index
asks here: the index classes' ``sanity_check`` (index.py: may a broker trust the file as it
is?), the audit (audit.py: ``klog verify`` / ``klog recover``) and ``klog dump-segment``
(which shows the sound entries and names the first bad one).

Speed: the shape of a sound offset index is settled by C-level comparisons over ``array``
columns, chunk by chunk, so memory is one chunk whatever the file's size and a broker's
start-up check of thousands of indexes stays cheap; only a chunk that fails them is walked
entry by entry, to name the fault. Nothing here touches the file system.
"""

from __future__ import annotations

import mmap
import operator
import struct
import sys
from array import array
from dataclasses import dataclass
from operator import itemgetter

OFFSET_INDEX_ENTRY_SIZE = 8
TIME_INDEX_ENTRY_SIZE = 12
ABORTED_TXN_SIZE = 34
ABORTED_TXN_VERSION = 0

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
ABORTED_TXN_ENTRY = struct.Struct(">hqqqq")

# What is judged at a time: bounds the memory of a whole-file check.
_CHUNK_ENTRIES = 65536
_LITTLE_ENDIAN = sys.byteorder == "little"

IndexBytes = bytes | bytearray | memoryview | mmap.mmap
_Row = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IndexShape:
    """How far an index file obeys the rules, and the first place it does not.

    ``entries`` counts the file's whole entries. The first ``usable`` are sound (a zero
    entry 0 included: Kafka's dump tool shows it); of those, ``written`` are entries a
    broker wrote (not the zero entry 0 of a file that is all zero entries). The
    ``preallocated`` zero entries after them run to the end of the file (0 when none do).
    ``problem`` names the first fault: the entry ``entry`` (its ``byte`` in the file and
    its values ``bad``: absolute offsets), or, with ``entry`` None, a size that is not a
    whole number of entries (``byte``: where the partial entry starts). ``unordered`` is
    the first usable time index entry whose timestamp does not increase.
    """

    entries: int
    usable: int
    written: int
    preallocated: int = 0
    problem: str | None = None
    entry: int | None = None
    byte: int | None = None
    bad: tuple[int, ...] | None = None
    unordered: int | None = None

    @property
    def dropped(self) -> int:
        """Entries from the faulty one on, which are not used (0 for a size fault)."""
        return self.entries - self.usable if self.entry is not None else 0

    @property
    def sound(self) -> bool:
        """True for a file to trust as it is: no fault, no zero tail, timestamps in order."""
        return self.problem is None and self.preallocated == 0 and self.unordered is None


# -- the rules of each kind -------------------------------------------------------------------


class _Rules:
    """One index kind's rules over raw entries (offsets relative to ``base``)."""

    entry: struct.Struct
    zero: _Row | None = None  # the entry that zero bytes decode to, if it is one

    def __init__(self, base: int) -> None:
        self.base = base

    def fast(self, chunk: bytes, previous: _Row | None) -> bool:
        """True when every entry of ``chunk`` (after ``previous``) is sound and in order;
        False says only that the entry-by-entry walk must look."""
        return False

    def fault(self, n: int, row: _Row, previous: _Row | None) -> str | None:
        raise NotImplementedError

    def out_of_order(self, row: _Row, previous: _Row) -> bool:
        return False

    def absolute(self, row: _Row) -> tuple[int, ...]:
        return row

    def describe(self, row: _Row) -> str:
        raise NotImplementedError


def _increasing(values: array[int] | list[int]) -> bool:
    # map(operator.lt, ...) runs in C: a 10 MiB index is checked in milliseconds.
    return all(map(operator.lt, values, values[1:]))


class _OffsetRules(_Rules):
    entry = OFFSET_ENTRY
    zero = (0, 0)

    def fast(self, chunk: bytes, previous: _Row | None) -> bool:
        values = array("i", chunk)
        if _LITTLE_ENDIAN:
            values.byteswap()
        relative, position = values[0::2], values[1::2]
        # Entry 0: not below the base offset, not negative; later ones: above the previous.
        low_relative, low_position = (-1, -1) if previous is None else previous
        return (
            relative[0] > low_relative
            and position[0] > low_position
            and _increasing(relative)
            and _increasing(position)
        )

    def fault(self, n: int, row: _Row, previous: _Row | None) -> str | None:
        relative, position = row
        offset = self.base + relative
        if relative < 0:
            return f"offset {offset} is below the segment's base offset {self.base}"
        if position < 0:
            return f"position {position} is negative"
        if previous is not None and relative <= previous[0]:
            return f"offset {offset} is not above entry {n - 1}'s offset {self.base + previous[0]}"
        if previous is not None and position <= previous[1]:
            return f"position {position} is not above entry {n - 1}'s position {previous[1]}"
        return None

    def absolute(self, row: _Row) -> tuple[int, ...]:
        return (self.base + row[0], row[1])

    def describe(self, row: _Row) -> str:
        return f"offset {self.base + row[0]}, position {row[1]}"


_first = itemgetter(0)
_second = itemgetter(1)


class _TimeRules(_Rules):
    entry = TIME_ENTRY
    zero = (0, 0)

    def fast(self, chunk: bytes, previous: _Row | None) -> bool:
        rows = list(TIME_ENTRY.iter_unpack(chunk))
        timestamps: list[int] = list(map(_first, rows))
        relative: list[int] = list(map(_second, rows))
        if previous is None:
            # Entry 0 may sit at the base offset; every later one lies above it.
            head = timestamps[0] >= 0 and relative[0] >= 0 and (
                len(relative) < 2 or relative[1] > 0
            )
        else:
            head = (
                relative[0] > 0 and relative[0] >= previous[1] and timestamps[0] > previous[0]
            )
        return (
            head
            and _increasing(timestamps)
            and all(map(operator.le, relative, relative[1:]))
        )

    def fault(self, n: int, row: _Row, previous: _Row | None) -> str | None:
        timestamp, relative = row
        offset = self.base + relative
        if relative < 0:
            return f"offset {offset} is below the segment's base offset {self.base}"
        if timestamp < 0:
            return f"timestamp {timestamp} is negative"
        if previous is not None and relative < previous[1]:
            return f"offset {offset} is below entry {n - 1}'s offset {self.base + previous[1]}"
        if previous is not None and relative == 0:
            return f"offset {offset} repeats the base offset (only a zero-filled tail may)"
        return None

    def out_of_order(self, row: _Row, previous: _Row) -> bool:
        return row[0] <= previous[0]

    def absolute(self, row: _Row) -> tuple[int, ...]:
        return (row[0], self.base + row[1])

    def describe(self, row: _Row) -> str:
        return f"timestamp {row[0]}, offset {self.base + row[1]}"


class _TxnRules(_Rules):
    # A .txnindex is appended to, never preallocated: a zero entry is judged like any other.
    entry = ABORTED_TXN_ENTRY

    def __init__(self, base: int | None) -> None:
        super().__init__(-1 if base is None else base)
        self.known_base = base is not None

    def fault(self, n: int, row: _Row, previous: _Row | None) -> str | None:
        version, producer_id, first, last, _lso = row
        if version != ABORTED_TXN_VERSION:
            return f"version {version} is not {ABORTED_TXN_VERSION}"
        if producer_id < 0:
            return f"producer id {producer_id} is negative"
        if first < 0 or first > last:
            return f"first offset {first} is negative or after its last offset {last}"
        if self.known_base and last < self.base:
            return f"last offset {last} is below the segment's base offset {self.base}"
        if previous is not None and last < previous[3]:
            return f"last offset {last} is below entry {n - 1}'s last offset {previous[3]}"
        return None

    def describe(self, row: _Row) -> str:
        return f"producerId {row[1]}, firstOffset {row[2]}, lastOffset {row[3]}"


# -- judging a file's bytes ----------------------------------------------------------------


def offset_index_shape(data: IndexBytes, base_offset: int) -> IndexShape:
    """The shape of an ``.index`` file's bytes (the segment's base offset given)."""
    return _judge(data, _OffsetRules(base_offset))


def time_index_shape(data: IndexBytes, base_offset: int) -> IndexShape:
    """The shape of a ``.timeindex`` file's bytes."""
    return _judge(data, _TimeRules(base_offset))


def txn_index_shape(data: IndexBytes, base_offset: int | None) -> IndexShape:
    """The shape of a ``.txnindex`` file's bytes; ``base_offset`` None when unknown (a file
    not named after one), which leaves that rule out."""
    return _judge(data, _TxnRules(base_offset))


def _judge(data: IndexBytes, rules: _Rules) -> IndexShape:
    size = len(data)
    entry_size = rules.entry.size
    count = size // entry_size
    whole = count * entry_size
    step = _CHUNK_ENTRIES * entry_size
    previous: _Row | None = None
    unordered: int | None = None
    first_is_zero = False
    n = 0
    for start in range(0, whole, step):
        chunk = bytes(data[start : min(whole, start + step)])
        if rules.fast(chunk, previous):
            n += len(chunk) // entry_size
            previous = rules.entry.unpack_from(chunk, len(chunk) - entry_size)
            continue
        for row in rules.entry.iter_unpack(chunk):
            if n > 0 and row == rules.zero:
                return _zero_tail(data, rules, n, count, first_is_zero, unordered)
            why = rules.fault(n, row, previous)
            if why is not None:
                return IndexShape(
                    count,
                    n,
                    n,
                    problem=f"entry {n} (byte {n * entry_size}: {rules.describe(row)}) is "
                    f"corrupt: {why}",
                    entry=n,
                    byte=n * entry_size,
                    bad=rules.absolute(row),
                    unordered=unordered,
                )
            if previous is None:
                first_is_zero = row == rules.zero
            elif unordered is None and rules.out_of_order(row, previous):
                unordered = n
            previous = row
            n += 1
    return _whole_entries(IndexShape(count, n, n, unordered=unordered), size, entry_size)


def _zero_tail(
    data: IndexBytes,
    rules: _Rules,
    start: int,
    count: int,
    first_is_zero: bool,
    unordered: int | None,
) -> IndexShape:
    """The shape when entry ``start`` (> 0) is the zero entry: a preallocated tail if zero
    bytes run to the last whole entry, else a fault at the first entry that is not zero."""
    entry_size = rules.entry.size
    nonzero = _first_nonzero_byte(data, start * entry_size, count * entry_size)
    if nonzero is None:
        # All zero entries from entry 0 on: nothing was ever written.
        written = 0 if start == 1 and first_is_zero else start
        shape = IndexShape(count, start, written, count - written, unordered=unordered)
        return _whole_entries(shape, len(data), entry_size)
    bad = nonzero // entry_size
    row = rules.entry.unpack_from(bytes(data[bad * entry_size : (bad + 1) * entry_size]))
    return IndexShape(
        count,
        start,
        start,
        problem=f"entry {bad} (byte {bad * entry_size}: {rules.describe(row)}) is not zero, "
        f"but follows the zero-filled tail that starts at entry {start}",
        entry=bad,
        byte=bad * entry_size,
        bad=rules.absolute(row),
        unordered=unordered,
    )


def _first_nonzero_byte(data: IndexBytes, start: int, end: int) -> int | None:
    step = _CHUNK_ENTRIES * OFFSET_INDEX_ENTRY_SIZE
    for low in range(start, end, step):
        block = bytes(data[low : min(end, low + step)])
        rest = block.lstrip(b"\x00")
        if rest:
            return low + len(block) - len(rest)
    return None


def _whole_entries(shape: IndexShape, size: int, entry_size: int) -> IndexShape:
    extra = size % entry_size
    if not extra:
        return shape
    whole = size - extra
    return IndexShape(
        shape.entries,
        shape.usable,
        shape.written,
        shape.preallocated,
        problem=f"{size} bytes is not a whole number of {entry_size}-byte entries: the last "
        f"{extra} bytes (from byte {whole}) are not an entry",
        byte=whole,
        unordered=shape.unordered,
    )


# -- decoding whole files ------------------------------------------------------------------


def offset_index_entries(data: IndexBytes, base_offset: int) -> list[tuple[int, int]]:
    """Every whole (absolute offset, position) entry of an ``.index`` file's bytes, zero
    tail included (a partial trailing entry is left out)."""
    whole = len(data) - len(data) % OFFSET_INDEX_ENTRY_SIZE
    return [
        (base_offset + relative, position)
        for relative, position in OFFSET_ENTRY.iter_unpack(memoryview(data)[:whole])
    ]


def time_index_entries(data: IndexBytes, base_offset: int) -> list[tuple[int, int]]:
    """Every whole (timestamp, absolute offset) entry of a ``.timeindex`` file's bytes."""
    whole = len(data) - len(data) % TIME_INDEX_ENTRY_SIZE
    return [
        (timestamp, base_offset + relative)
        for timestamp, relative in TIME_ENTRY.iter_unpack(memoryview(data)[:whole])
    ]
