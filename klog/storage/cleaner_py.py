"""The Python reference of ``_cleaner.c``: the log cleaner's hot loops, same inputs, same results.

This module owns the offset map's table layout and the per-record work of cleaning a v2
records section (decompressed): putting keys into the map, deciding which records a
cleaning keeps, and moving record timestamps to a new base (a delete horizon). ``cleaner.py``
takes the C functions when ``klog.storage._cleaner`` is built and these otherwise; the
tests run both on the same inputs and compare every result, table bytes included.

The table: ``slots`` entries of 24 bytes in a bytearray, each the 16-byte MD5 of a key then
its offset as a little-endian int64; 24 zero bytes are an empty slot. A key's slots, in
probe order: attempts 0..15 at ``(h1 + i * h2) mod slots`` (h1, h2: the MD5's two
little-endian 64-bit halves, h2 made odd; arithmetic mod 2^64), then one by one from the
last of those, so a probe sequence meets every slot. Kafka's SkimpyOffsetMap keeps the same
entry (hash, offset) in the same 24 bytes; its probe order differs, which nothing outside
the map can see.

Records are read with the one v2 grammar, records/v2.py's ``walk_records`` (C:
klog/_v2records.h): every record of a section is checked before any is used, and a
malformed section raises ValueError with walk_records' message naming the batch at
``batch_position``; the caller turns it into CorruptRecordError.
"""

from __future__ import annotations

import hashlib

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.v2 import RecordFieldsRow, walk_records
from klog.protocol.records.varint import read_unsigned_varlong, write_varint, write_varlong

ENTRY_SIZE = 24
HASH_SIZE = 16
RANDOM_PROBES = 16
_MASK64 = 2**64 - 1
_EMPTY = bytes(ENTRY_SIZE)

Buffer = bytes | bytearray | memoryview


def md5(data: Buffer) -> bytes:
    return hashlib.md5(data).digest()


def _wrap(value: int) -> int:
    """int64 arithmetic as C and Java do it (wrapping)."""
    return ((value + 2**63) & _MASK64) - 2**63


def _first_slot(key_hash: bytes, slots: int) -> tuple[int, int]:
    h1 = int.from_bytes(key_hash[:8], "little")
    h2 = int.from_bytes(key_hash[8:16], "little") | 1
    return h1, h2


def _slot(h1: int, h2: int, attempt: int, slots: int, previous: int) -> int:
    if attempt < RANDOM_PROBES:
        return ((h1 + attempt * h2) & _MASK64) % slots
    return (previous + 1) % slots


def _probe(table: bytearray, slots: int, key_hash: bytes) -> tuple[int, bool]:
    """(byte position, holds the key) of the first slot on ``key_hash``'s probe sequence
    that holds it or is empty; (-1, False) when the table has neither for it."""
    h1, h2 = _first_slot(key_hash, slots)
    slot = 0
    for attempt in range(slots + RANDOM_PROBES):
        slot = _slot(h1, h2, attempt, slots, slot)
        pos = slot * ENTRY_SIZE
        entry = table[pos : pos + ENTRY_SIZE]
        if entry == _EMPTY:
            return pos, False
        if entry[:HASH_SIZE] == key_hash:
            return pos, True
    return -1, False


def table_put(table: bytearray, slots: int, key_hash: bytes, offset: int) -> int:
    """Map ``key_hash`` to ``offset``: 1 for a new entry, 0 for an overwrite, -1 when the
    table has no free slot for a new key."""
    pos, found = _probe(table, slots, key_hash)
    if pos < 0:
        return -1
    if not found:
        table[pos : pos + HASH_SIZE] = key_hash
    table[pos + HASH_SIZE : pos + ENTRY_SIZE] = offset.to_bytes(8, "little", signed=True)
    return 0 if found else 1


def table_get(table: bytearray, slots: int, key_hash: bytes) -> int:
    """The offset mapped for ``key_hash``, or -1."""
    pos, found = _probe(table, slots, key_hash)
    if not found:
        return -1
    return int.from_bytes(table[pos + HASH_SIZE : pos + ENTRY_SIZE], "little", signed=True)


def table_clear(table: bytearray) -> None:
    table[:] = bytes(len(table))


def _rows(data: Buffer, count: int, batch_position: int) -> list[RecordFieldsRow]:
    """Every record of the section, checked by the one v2 grammar (``walk_records``);
    ValueError with its message at the first malformation."""
    rows: list[RecordFieldsRow] = []
    try:
        walk_records(bytes(data), count, batch_position, rows)
    except CorruptRecordError as exc:
        raise ValueError(str(exc)) from None
    return rows


def map_records(
    table: bytearray,
    slots: int,
    size: int,
    max_size: int,
    data: Buffer,
    count: int,
    base_offset: int,
    start_offset: int,
    batch_position: int,
) -> tuple[int, int, int, bool]:
    """Put the keys of a records section into the table (Kafka's buildOffsetMapForSegment's
    inner loop): records with a key and an offset >= ``start_offset``, while the table holds
    fewer than ``max_size`` entries. Returns (size, records read, offset of the last record
    put or -1, full): full when a record needing a put found ``size >= max_size``; records
    read then counts the records before it. Every record is checked first, as the C twin
    checks them all."""
    last_put = -1
    for read, row in enumerate(_rows(data, count, batch_position)):
        offset = _wrap(base_offset + row[1])
        key_pos, key_size = row[2], row[3]
        if key_size >= 0 and offset >= start_offset:
            added = -1
            if size < max_size:
                added = table_put(table, slots, md5(data[key_pos : key_pos + key_size]), offset)
            if added < 0:
                return size, read, last_put, True
            size += added
            last_put = offset
    return size, count, last_put, False


class FilterResult:
    """What ``filter_records`` kept of a records section."""

    __slots__ = ("invalid", "kept", "kept_count", "max_offset", "max_timestamp",
                 "offset_of_max_timestamp", "tombstones_kept", "tombstones_removed")

    def __init__(
        self,
        kept: bytes | None,
        kept_count: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        max_offset: int,
        tombstones_kept: int,
        tombstones_removed: int,
        invalid: int,
    ) -> None:
        self.kept = kept  # None: every record kept (the section as it was)
        self.kept_count = kept_count
        self.max_timestamp = max_timestamp  # base timestamp + largest delta kept; -1: none
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.max_offset = max_offset
        self.tombstones_kept = tombstones_kept
        self.tombstones_removed = tombstones_removed
        self.invalid = invalid

    def as_tuple(self) -> tuple[bytes | None, int, int, int, int, int, int, int]:
        return (self.kept, self.kept_count, self.max_timestamp, self.offset_of_max_timestamp,
                self.max_offset, self.tombstones_kept, self.tombstones_removed, self.invalid)


def filter_records(
    table: bytearray,
    slots: int,
    latest_offset: int,
    data: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    retain_deletes: bool,
    batch_position: int,
) -> tuple[bytes | None, int, int, int, int, int, int, int]:
    """Which records of a section a cleaning keeps (Kafka's shouldRetainRecord).

    Kept: a record past ``latest_offset`` (not mapped yet); otherwise one with a key whose
    offset is at least the map's offset for it, unless it is a tombstone and
    ``retain_deletes`` is False. Records without a key are dropped and counted invalid.
    Returns FilterResult's fields as a tuple; ``kept`` holds the kept records' bytes
    unchanged (None when all were kept).
    """
    kept = bytearray()
    kept_count = 0
    max_ts, offset_of_max, max_offset = -1, -1, -1
    tomb_kept = tomb_removed = invalid = 0
    first_ts = True
    start = 0
    for ts_delta, offset_delta, key_pos, key_size, _vp, value_size, _h, _body, stop in _rows(
        data, count, batch_position
    ):
        record_start, start = start, stop
        offset = _wrap(base_offset + offset_delta)
        keep = True
        if offset <= latest_offset:
            if key_size < 0:
                invalid += 1
                keep = False
            else:
                latest = offset >= table_get(table, slots, md5(data[key_pos : key_pos + key_size]))
                if latest and value_size < 0 and not retain_deletes:
                    tomb_removed += 1
                keep = latest and (value_size >= 0 or retain_deletes)
        if not keep:
            continue
        kept += data[record_start:stop]
        kept_count += 1
        if value_size < 0:
            tomb_kept += 1
        timestamp = _wrap(base_timestamp + ts_delta)
        if first_ts or timestamp > max_ts:
            max_ts, offset_of_max = timestamp, offset
            first_ts = False
        max_offset = max(max_offset, offset)
    whole = None if kept_count == count else bytes(kept)
    return (whole, kept_count, max_ts, offset_of_max, max_offset, tomb_kept, tomb_removed,
            invalid)


def rebase_timestamps(data: Buffer, count: int, shift: int, batch_position: int) -> bytes:
    """The section with ``shift`` added to every record's timestampDelta (a new base
    timestamp ``old - shift`` keeps every record's timestamp); lengths re-encoded."""
    out = bytearray()
    start = 0
    for ts_delta, *_fields, body, stop in _rows(data, count, batch_position):
        # The timestampDelta follows the attributes byte at ``body``.
        _raw, ts_end = read_unsigned_varlong(data, body + 1)
        record = (
            bytes(data[body : body + 1])
            + write_varlong(_wrap(ts_delta + shift))
            + bytes(data[ts_end:stop])
        )
        out += write_varint(len(record))
        out += record
        start = stop
    del start
    return bytes(out)
