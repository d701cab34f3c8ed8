"""OffsetMap: the log cleaner's map of key hash -> latest offset (Kafka's SkimpyOffsetMap).

A fixed table in the dedupe buffer, 24 bytes per entry (a 16-byte MD5 of the key and an
8-byte offset, as Kafka's log.cleaner.hash.algorithm=MD5), filled over a log's dirty
section and asked, for each record of the segments being cleaned, whether a later record
has the same key. The hashing, the table and the loops over a batch's records run in
``_cleaner.c`` with the GIL released; ``cleaner_py`` is their Python twin, with identical
results. Used by one cleaner thread at a time (klog/storage/cleaner.py).
"""

from __future__ import annotations

import hashlib
import os
from typing import Protocol, cast

from klog.protocol.errors import CorruptRecordError
from klog.storage import cleaner_py as _py

# The C twin of cleaner_py; absent without a compiler, or skipped with KLOG_PURE_PYTHON=1.
_c: object | None = None
if not os.environ.get("KLOG_PURE_PYTHON"):
    try:
        from klog.storage import _cleaner as _c_module

        _c = _c_module
    except ImportError:  # pragma: no cover - depends on the build
        _c = None


Buffer = bytes | bytearray | memoryview

HASH_SIZE = 16  # MD5, as Kafka's SkimpyOffsetMap (log.cleaner.hash.algorithm=MD5)
BYTES_PER_ENTRY = HASH_SIZE + 8  # Kafka's 24 bytes per offset map entry


class OffsetMap:
    """Key hash -> offset of its latest record, in a fixed byte budget (Kafka's SkimpyOffsetMap).

    Open addressing over ``memory // 24`` slots of 24 bytes (16-byte MD5 of the key, 8-byte
    offset); a slot whose bytes are all zero is empty. Two keys with the same MD5 are the
    same key, as in Kafka. Not thread-safe.

    ``use_c``: None takes the C extension when it is built, False forces the Python twin
    (same slots, same probing, same results), True requires the extension.
    """

    bytes_per_entry = BYTES_PER_ENTRY

    def __init__(self, memory: int, *, use_c: bool | None = None) -> None:
        if memory < BYTES_PER_ENTRY:
            raise ValueError(f"an offset map needs at least {BYTES_PER_ENTRY} bytes, not {memory}")
        self.memory = memory
        self.slots = memory // BYTES_PER_ENTRY
        self._ops = _backend(use_c)
        self._table = bytearray(self.slots * BYTES_PER_ENTRY)
        self._size = 0
        self._latest_offset = -1
        self._dirty = False  # the table holds entries (clear has work to do)

    @property
    def size(self) -> int:
        """Entries in the map (distinct key hashes)."""
        return self._size

    @property
    def utilization(self) -> float:
        """size / slots."""
        return self._size / self.slots

    @property
    def latest_offset(self) -> int:
        """The highest offset put (or set by ``update_latest_offset``); -1 when empty."""
        return self._latest_offset

    def update_latest_offset(self, offset: int) -> None:
        """Say that the map covers the log up to ``offset`` (records without keys, gaps)."""
        self._latest_offset = offset

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Map ``key`` to ``offset``; raises ValueError when a new key finds the map full."""
        added = self._ops.table_put(self._table, self.slots, self._ops.md5(key), offset)
        if added < 0:
            raise ValueError("attempt to add a new entry to a full offset map")
        self._size += added
        self._latest_offset = offset
        self._dirty = True

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The offset mapped for ``key``, or -1."""
        return int(self._ops.table_get(self._table, self.slots, self._ops.md5(key)))

    def clear(self) -> None:
        """Empty the map (size 0, latest offset -1) keeping its memory."""
        if self._dirty:
            self._ops.table_clear(self._table)
        self._size = 0
        self._latest_offset = -1
        self._dirty = False

    @property
    def is_c(self) -> bool:
        """Whether the C extension does this map's work."""
        return self._ops is not _py

    # -- the cleaner's batch operations (one call per records section) --------------------

    def put_records(
        self, data: bytes | bytearray | memoryview, count: int, base_offset: int,
        start_offset: int, max_size: int, batch_position: int = 0,
    ) -> tuple[int, bool]:
        """Put the keys of a decompressed v2 records section (offsets >= ``start_offset``)
        while the map holds fewer than ``max_size`` entries: (records read, full).
        CorruptRecordError (naming the batch at ``batch_position``) for a malformed
        section; the map must then be cleared before it is used again."""
        self._dirty = True
        try:
            size, read, last_put, full = self._ops.map_records(
                self._table, self.slots, self._size, max_size, data, count, base_offset,
                start_offset, batch_position,
            )
        except ValueError as exc:
            raise CorruptRecordError(str(exc)) from None
        self._size = size
        if last_put >= 0:
            self._latest_offset = last_put
        return read, full

    def filter_records(
        self, data: bytes | bytearray | memoryview, count: int, base_offset: int,
        base_timestamp: int, retain_deletes: bool, batch_position: int = 0,
    ) -> _py.FilterResult:
        """Which records of a decompressed v2 records section a cleaning keeps."""
        try:
            result = self._ops.filter_records(
                self._table, self.slots, self._latest_offset, data, count, base_offset,
                base_timestamp, retain_deletes, batch_position,
            )
        except ValueError as exc:
            raise CorruptRecordError(str(exc)) from None
        return _py.FilterResult(*result)

    def table_bytes(self) -> bytes:
        """A copy of the table (tests compare the C and Python maps byte for byte)."""
        return bytes(self._table)


class _Ops(Protocol):
    """The functions ``_cleaner.c`` and ``cleaner_py`` both provide."""

    def md5(self, data: Buffer, /) -> bytes: ...
    def table_put(self, table: bytearray, slots: int, key_hash: bytes, offset: int, /) -> int: ...
    def table_get(self, table: bytearray, slots: int, key_hash: bytes, /) -> int: ...
    def table_clear(self, table: bytearray, /) -> None: ...
    def map_records(
        self, table: bytearray, slots: int, size: int, max_size: int, data: Buffer, count: int,
        base_offset: int, start_offset: int, batch_position: int, /,
    ) -> tuple[int, int, int, bool]: ...
    def filter_records(
        self, table: bytearray, slots: int, latest_offset: int, data: Buffer, count: int,
        base_offset: int, base_timestamp: int, retain_deletes: bool, batch_position: int, /,
    ) -> tuple[bytes | None, int, int, int, int, int, int, int]: ...
    def rebase_timestamps(
        self, data: Buffer, count: int, shift: int, batch_position: int, /
    ) -> bytes: ...


def _backend(use_c: bool | None) -> _Ops:
    if use_c is False:
        return cast(_Ops, _py)
    if _c is None:
        if use_c:
            raise RuntimeError("klog.storage._cleaner is not built (python setup.py build_ext)")
        return cast(_Ops, _py)
    return cast(_Ops, _c)


def key_hash(key: bytes | bytearray | memoryview) -> bytes:
    """The 16 bytes a key is mapped by (MD5, as Kafka's default log.cleaner.hash.algorithm)."""
    return hashlib.md5(key).digest()
