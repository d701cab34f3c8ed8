"""Dumping a segment's index files (``.index``, ``.timeindex``, ``.txnindex``) as events.

An index file's shape is judged before its entries are used, by storage's one rule set
(storage/index_entries.py, the rules ``OffsetIndex.sanity_check`` and the audit use): a
size that is not a whole number of entries, an entry below the base offset or with a
negative position, or entries that stop increasing (other than a preallocated zero tail)
end the dump of that file with a ``CorruptIndexEvent`` naming the entry and the fault, and
count the file in ``ReportTally.damaged``. Only the sound entries are listed and compared
with the log beside the index: each entry's batch header is read once (storage's
``walk.read_entry_at``), and the mismatches go to Kafka's end-of-run reports.

Kafka's tool would create a missing ``.index`` as a side effect of a time index lookup;
nothing here ever writes.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from klog.protocol.errors import KafkaError
from klog.protocol.records.batch import DEFAULT_MAX_BATCH_SIZE
from klog.storage.files import INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, offset_from_filename_or_none
from klog.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from klog.storage.index_entries import (
    ABORTED_TXN_ENTRY,
    ABORTED_TXN_SIZE,
    OFFSET_INDEX_ENTRY_SIZE,
    IndexShape,
    offset_index_entries,
    offset_index_shape,
    time_index_entries,
    time_index_shape,
    txn_index_shape,
)
from klog.storage.walk import BatchWalk, read_entry_at
from klog.tools.dump.events import (
    CorruptIndexEvent,
    DumpEvent,
    IndexEmptyEvent,
    IndexEntryEvent,
    ProblemEvent,
    ReportTally,
    SanityCheckEvent,
    TimeIndexEntryEvent,
    TxnIndexEntryEvent,
    java_path,
)
from klog.tools.dump.options import (
    CHUNK_SIZE,
    IN_MEMORY_BATCH_BOUND,
    MAX_DECOMPRESSED_SIZE,
    DumpOptions,
)

_NO_BASE_OFFSET = "the file name does not start with a base offset"


def _beside(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.split(".", 1)[0] + suffix)


def dump_offset_index(
    arg: str, path: Path, opts: DumpOptions, tally: ReportTally
) -> Iterator[DumpEvent]:
    """An ``.index``: its sound entries, each compared with the batch it names."""
    base = offset_from_filename_or_none(path.name)
    if base is None:
        yield ProblemEvent(arg, _NO_BASE_OFFSET)
        return
    data = path.read_bytes()
    entries = offset_index_entries(data, base)
    shape = offset_index_shape(data, base)
    if not entries:
        yield IndexEmptyEvent(arg)
        yield from _corrupt(arg, shape, tally)
        return
    if opts.index_sanity_check:
        yield from _sanity_check(arg, shape, tally, lambda: OffsetIndex(path, base, writable=False))
        return
    total = len(entries)
    del entries[shape.usable :]
    log_path = _beside(path, LOG_FILE_SUFFIX)
    log = open(log_path, "rb") if log_path.is_file() else None  # noqa: SIM115
    if log is None:
        yield ProblemEvent(arg, f"no log file {log_path.name} beside it; entries not verified")
    mismatches: list[tuple[int, int]] = []
    try:
        log_size = os.fstat(log.fileno()).st_size if log is not None else 0
        # Only the sound entries (the shape check stopped at a zero-filled tail, as
        # Kafka does, or at the first corrupt entry).
        for n, (offset, position) in enumerate(entries):
            if log is not None and position >= log_size:
                # Positions increase: this entry and all after it point past the log.
                # Kafka reports it as a mismatch; it also ends the index.
                mismatches.append((offset, -1))
                shape = IndexShape(
                    total,
                    n,
                    n,
                    problem=f"entry {n} (byte {n * OFFSET_INDEX_ENTRY_SIZE}: offset {offset}, "
                    f"position {position}) is corrupt: position {position} is past the "
                    f"end of {log_path.name} ({log_size} bytes)",
                    entry=n,
                    byte=n * OFFSET_INDEX_ENTRY_SIZE,
                )
                break
            if log is not None:
                limit = min(opts.max_message_size, max(0, log_size - position))
                header = read_entry_at(log.fileno(), position, position + limit,
                                       max_batch_size=DEFAULT_MAX_BATCH_SIZE, whole=False)
                found = -1 if header is None else header.last_offset
                if found != offset:
                    mismatches.append((offset, found))
            if not opts.verify_index_only:
                yield IndexEntryEvent(offset, position)
    finally:
        if log is not None:
            log.close()
    if mismatches:
        # Kafka prepends to a list, so its report lists the last mismatch first.
        tally.index_mismatches[java_path(arg)] = mismatches[::-1]
    yield from _corrupt(arg, shape, tally)


def _corrupt(arg: str, shape: IndexShape, tally: ReportTally) -> Iterator[DumpEvent]:
    if shape.problem is None:
        return
    tally.damaged += 1
    message = shape.problem
    first, last = shape.usable, shape.usable + shape.dropped - 1
    if shape.dropped == 1:
        message += f"; entry {first} is not dumped"
    elif shape.dropped:
        message += f"; entries {first} to {last} are not dumped"
    yield CorruptIndexEvent(arg, message, shape.entry, shape.byte)


def _sanity_check(
    arg: str, shape: IndexShape, tally: ReportTally,
    open_index: Callable[[], OffsetIndex | TimeIndex],
) -> Iterator[DumpEvent]:
    """Kafka's --index-sanity-check: the shape first (it names the bad entry), then the
    index class's own check (which also refuses a zero-filled tail)."""
    if shape.problem is not None:
        tally.damaged += 1
        yield CorruptIndexEvent(
            arg, f"failed sanity check: {shape.problem}", shape.entry, shape.byte
        )
        return
    try:
        index = open_index()
        try:
            index.sanity_check()
        finally:
            index.close()
    except CorruptIndexError as exc:
        tally.damaged += 1
        yield CorruptIndexEvent(arg, f"failed sanity check: {exc}")
    else:
        yield SanityCheckEvent(arg)


def dump_time_index(
    arg: str, path: Path, opts: DumpOptions, tally: ReportTally
) -> Iterator[DumpEvent]:
    """A ``.timeindex``: its sound entries, each compared with the batch its offset is in
    (found through the sound entries of the ``.index`` beside it)."""
    base = offset_from_filename_or_none(path.name)
    if base is None:
        yield ProblemEvent(arg, _NO_BASE_OFFSET)
        return
    data = path.read_bytes()
    entries = time_index_entries(data, base)
    shape = time_index_shape(data, base)
    if opts.index_sanity_check:
        yield from _sanity_check(arg, shape, tally, lambda: TimeIndex(path, base, writable=False))
        return
    del entries[shape.usable :]
    log_path = _beside(path, LOG_FILE_SUFFIX)
    index_path = _beside(path, INDEX_FILE_SUFFIX)
    log = open(log_path, "rb") if log_path.is_file() else None  # noqa: SIM115
    if log is None and entries:
        yield ProblemEvent(arg, f"no log file {log_path.name} beside it; entries not verified")
    # Kafka's tool would create a missing .index as a side effect; we never write, and
    # an absent offset index means every lookup starts at position 0, as an empty one.
    # Only the sound entries of the .index beside are used: a damaged one would send
    # the search into the middle of a batch.
    lookup: list[tuple[int, int]] = []
    if log is not None and entries and index_path.is_file():
        lookup, problem = _sound_offset_index(index_path, base, log)
        if problem is not None:
            yield ProblemEvent(
                arg, f"{index_path.name} beside it is damaged ({problem}); lookups use "
                "only its entries before the fault"
            )
    lookup_offsets = [o for o, _ in lookup]
    key = java_path(arg)
    mismatches: list[tuple[int, int]] = []
    out_of_order: list[tuple[int, int]] = []
    not_found: list[tuple[int, int]] = []
    try:
        previous = -1
        for timestamp, offset in entries:
            if log is not None:
                # OffsetIndex.lookup: the largest entry at or below the offset.
                slot = bisect_right(lookup_offsets, offset) - 1
                position = lookup[slot][1] if slot >= 0 else 0
                found = _find_batch(log, position, offset)
                if found is None:
                    not_found.append((offset, -1))
                elif found[0] != offset:
                    not_found.append((offset, found[0]))
                else:
                    if found[1] != timestamp:
                        mismatches.append((timestamp, found[1]))
                    if previous >= timestamp:
                        out_of_order.append((timestamp, previous))
            if not opts.verify_index_only:
                yield TimeIndexEntryEvent(timestamp, offset)
            previous = timestamp
    finally:
        if log is not None:
            log.close()
    for report, pairs in (
        (tally.time_mismatches, mismatches),
        (tally.time_out_of_order, out_of_order),
        (tally.time_not_found, not_found),
    ):
        if pairs:
            report[key] = pairs
    yield from _corrupt(arg, shape, tally)


def _sound_offset_index(
    path: Path, base: int, log: BinaryIO
) -> tuple[list[tuple[int, int]], str | None]:
    """The leading entries of an .index that are sound and point inside ``log``, and the
    fault that ended them (None when the whole file is sound)."""
    data = path.read_bytes()
    entries = offset_index_entries(data, base)
    shape = offset_index_shape(data, base)
    del entries[shape.usable :]
    log_size = os.fstat(log.fileno()).st_size
    for n, (_offset, position) in enumerate(entries):
        if position >= log_size:
            del entries[n:]
            return entries, f"entry {n} points past the end of the log"
    return entries, shape.problem


def _find_batch(log: BinaryIO, position: int, offset: int) -> tuple[int, int] | None:
    """(lastOffset, max record timestamp) of the first batch at/after ``position`` whose
    last offset reaches ``offset``; None when there is none."""
    from klog.protocol.records.decode import iter_records

    log_size = os.fstat(log.fileno()).st_size
    if position >= log_size:
        return None
    walk = BatchWalk(
        log.fileno(), position, log_size, chunk_size=CHUNK_SIZE,
        hold_bound=IN_MEMORY_BATCH_BOUND,
    )
    for _position, h, buf in walk:
        if h.last_offset < offset:
            continue
        if h.last_offset != offset or buf is None:
            return h.last_offset, h.max_timestamp
        max_timestamp = -1
        try:
            for r in iter_records(buf, h, max_decompressed_size=MAX_DECOMPRESSED_SIZE):
                max_timestamp = max(max_timestamp, r.timestamp)
        except KafkaError:
            max_timestamp = h.max_timestamp
        return h.last_offset, max_timestamp
    return None


def dump_txn_index(arg: str, path: Path, tally: ReportTally) -> Iterator[DumpEvent]:
    """A ``.txnindex``: its sound entries (aborted transactions)."""
    data = path.read_bytes()
    shape = txn_index_shape(data, offset_from_filename_or_none(path.name))
    usable = memoryview(data)[: shape.usable * ABORTED_TXN_SIZE]
    for version, producer_id, first, last, lso in ABORTED_TXN_ENTRY.iter_unpack(usable):
        yield TxnIndexEntryEvent(version, producer_id, first, last, lso)
    yield from _corrupt(arg, shape, tally)
