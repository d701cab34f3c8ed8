"""Reading a log directory without a broker: partitions, offsets, transactions and rows.

This module owns the offline side of the "klog" data source. ``path`` is a ``log.dirs``
directory that klog or Apache Kafka wrote; each ``<topic>-<partition>`` directory in it is a
partition and each ``NNNN.log`` file a segment. Nothing here writes: files are opened
read-only, indexes are only consulted (a missing or stale ``.index`` costs a scan from the
segment's start, never a wrong answer), and a torn entry at the end of the active segment
(a broker appending right now) ends the segment quietly.

Planning (on the Spark driver) needs the partition's offsets: the log start offset is the
first entry of the first segment (or the ``log-start-offset-checkpoint``, when higher), the
log end offset comes from a walk of the last segment from its last index entry. For
read_committed it also needs the aborted transactions -- the ``.txnindex`` files, as
Kafka's broker answers them -- and the last stable offset (the first offset of a
transaction that has no marker yet), which takes a header-only walk of the partition.

Reading (in a Spark task) walks whole entries of one segment in big chunks and decodes only
the records of [start, end): control batches are never rows, and for read_committed the
batches of aborted transactions are skipped as Kafka's consumer skips them (aborted
transactions queued by first offset, a producer aborted from its first offset until its
ABORT marker).
"""

from __future__ import annotations

import bisect
import heapq
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    DEFAULT_MAX_BATCH_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    iter_batch_headers,
)
from klog.protocol.records.control import ControlRecordType, parse_control_key
from klog.protocol.records.decode import iter_records
from klog.spark.arrow import DEFAULT_BATCH_ROWS, ColumnBuilder
from klog.spark.columns import append_v2_batch
from klog.storage.checkpoints import CheckpointError, read_offset_checkpoint
from klog.storage.files import (
    LOG_FILE_SUFFIX,
    log_file_path,
    offset_index_file_path,
    txn_index_file_path,
)
from klog.storage.index import TransactionIndex
from klog.storage.log import parse_partition_dir_name
from klog.storage.walk import CORRUPT, BatchWalk

CHUNK_SIZE = 8 * 1024 * 1024
# Kafka accepts batches up to message.max.bytes (1 MiB by default) and topics may raise it;
# anything above this bound is treated as corruption rather than allocated.
MAX_BATCH_SIZE = max(DEFAULT_MAX_BATCH_SIZE, 64 * 1024 * 1024)
# Bound on one batch's records once decompressed: a decompression bomb fails, not expands.
MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024
_INDEX_ENTRY = struct.Struct(">ii")
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"


class OfflineError(Exception):
    """A log directory that cannot be read as asked (missing, not a log dir, corrupt)."""


@dataclass(frozen=True, slots=True)
class PartitionFiles:
    """One partition directory and the base offsets of its segments, ascending."""

    topic: str
    partition: int
    directory: str
    segment_bases: tuple[int, ...]

    def log_path(self, base_offset: int) -> Path:
        return log_file_path(Path(self.directory), base_offset)

    def segment_index_for(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (the last with base <= offset), or 0."""
        return max(bisect.bisect_right(self.segment_bases, offset) - 1, 0)


def list_partitions(log_dir: str | Path) -> dict[tuple[str, int], PartitionFiles]:
    """Every live partition directory of ``log_dir`` (deleted/future/stray ones are not)."""
    root = Path(log_dir)
    if not root.is_dir():
        raise OfflineError(f"{root} is not a directory")
    found: dict[tuple[str, int], PartitionFiles] = {}
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            continue
        try:
            name = parse_partition_dir_name(entry.name)
        except ValueError:
            continue
        if name.kind:
            continue
        bases = sorted(
            int(p.stem) for p in entry.iterdir() if p.suffix == LOG_FILE_SUFFIX and p.stem.isdigit()
        )
        found[(name.topic, name.partition)] = PartitionFiles(
            name.topic, name.partition, str(entry), tuple(bases)
        )
    return found


# -- walking entries --------------------------------------------------------------------------


def iter_entries(
    path: Path, position: int = 0
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """(header, buffer) for each whole entry of a .log file from ``position``.

    The walk is storage's ``BatchWalk``. ``header.position`` is relative to the buffer,
    which stays valid after the next item (each chunk is its own buffer). A partial entry
    at the end of the file ends the walk quietly (a broker may be appending); an impossible
    length or magic raises OfflineError naming the file and position.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise OfflineError(f"cannot read {path}: {exc.strerror}") from None
    try:
        walk = BatchWalk(
            fd, position, os.fstat(fd).st_size, max_batch_size=MAX_BATCH_SIZE,
            chunk_size=CHUNK_SIZE,
        )
        for _position, header, buf in walk:
            assert buf is not None  # no hold_bound: every entry is held
            yield header, buf
        stop = walk.stop
        if stop is not None and stop.kind == CORRUPT:
            raise OfflineError(
                f"{path}: corrupt entry at position {stop.position}: {stop.reason}"
            )
    finally:
        os.close(fd)


def _index_position(files: PartitionFiles, base_offset: int, target: int) -> int:
    """A file position to start reading ``target`` from: the last offset-index entry at or
    below it, checked against the log (a stale or foreign index gives 0, a full scan)."""
    index_path = offset_index_file_path(Path(files.directory), base_offset)
    try:
        data = index_path.read_bytes()
    except OSError:
        return 0
    entries = len(data) // _INDEX_ENTRY.size
    lo, hi, best = 0, entries - 1, -1
    relative = target - base_offset
    while lo <= hi:  # largest slot whose relative offset <= target
        mid = (lo + hi) // 2
        rel, _pos = _INDEX_ENTRY.unpack_from(data, mid * _INDEX_ENTRY.size)
        if rel <= relative:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best < 0:
        return 0
    _rel, position = _INDEX_ENTRY.unpack_from(data, best * _INDEX_ENTRY.size)
    # Trust the entry only if a sane entry starts there and ends at or before the target.
    try:
        with open(files.log_path(base_offset), "rb") as f:
            f.seek(position)
            head = f.read(LOG_OVERHEAD + 61)
    except OSError:
        return 0
    try:
        header = next(iter_batch_headers(head, max_batch_size=MAX_BATCH_SIZE), None)
    except CorruptRecordError:
        return 0
    if header is None:
        # The entry is bigger than what was read: parse just its fixed fields.
        try:
            offset, length = struct.unpack_from(">qi", head)
        except struct.error:
            return 0
        return position if 0 < length <= MAX_BATCH_SIZE and offset <= target else 0
    return position if header.last_offset <= target else 0


# -- offsets ------------------------------------------------------------------------------------


def log_start_offset(files: PartitionFiles) -> int:
    start = 0
    for base in files.segment_bases:
        first = next(iter_entries(files.log_path(base)), None)
        if first is not None:
            header = first[0]
            start = header.base_offset if header.base_offset is not None else base
            break
    else:
        start = files.segment_bases[-1] if files.segment_bases else 0
    checkpoint = Path(files.directory).parent / LOG_START_OFFSET_CHECKPOINT
    try:
        recorded = read_offset_checkpoint(checkpoint).get((files.topic, files.partition))
    except (OSError, CheckpointError):
        recorded = None
    return max(start, recorded or 0)


def log_end_offset(files: PartitionFiles) -> int:
    """One past the last offset in the partition (the next offset a broker would assign)."""
    for base in reversed(files.segment_bases):
        position = _last_index_position(files, base)
        next_offset = None
        for header, _buf in iter_entries(files.log_path(base), position):
            next_offset = header.next_offset
        if next_offset is not None:
            return next_offset
    return files.segment_bases[-1] if files.segment_bases else 0


def _last_index_position(files: PartitionFiles, base: int) -> int:
    return _index_position(files, base, 2**63 - 1)


def offset_for_timestamp(files: PartitionFiles, timestamp: int) -> int | None:
    """The first offset whose record timestamp is >= ``timestamp`` (None: no such record)."""
    for base in files.segment_bases:
        for header, buf in iter_entries(files.log_path(base)):
            if header.max_timestamp < timestamp or header.is_control:
                continue
            for record in iter_records(buf, header):
                if record.timestamp >= timestamp:
                    return record.offset
    return None


@dataclass(frozen=True, slots=True)
class TxnState:
    """What read_committed needs of one partition: aborted (producer_id, first_offset,
    last_offset) triples and the last stable offset."""

    aborted: tuple[tuple[int, int, int], ...]
    last_stable_offset: int


def transaction_state(files: PartitionFiles, log_end: int) -> TxnState:
    aborted = []
    for base in files.segment_bases:
        path = txn_index_file_path(Path(files.directory), base)
        if path.exists():
            for txn in TransactionIndex(path, base).all_aborted_txns():
                aborted.append((txn.producer_id, txn.first_offset, txn.last_offset))
    # Open transactions: a transactional batch starts one for its producer, a marker of
    # that producer ends it. What is still open at the end bounds what is stable.
    open_txns: dict[int, int] = {}
    for base in files.segment_bases:
        for header, _buf in iter_entries(files.log_path(base)):
            if not header.is_transactional:
                continue
            if header.is_control:
                open_txns.pop(header.producer_id, None)
            else:
                open_txns.setdefault(header.producer_id, header.base_offset or 0)
    lso = min(open_txns.values(), default=log_end)
    return TxnState(tuple(sorted(aborted, key=lambda t: t[1])), lso)


# -- rows -----------------------------------------------------------------------------------------


def _is_abort_marker(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    for record in iter_records(buf, header):
        try:
            return parse_control_key(record.key)[1] is ControlRecordType.ABORT
        except CorruptRecordError:
            return False
    return False


def _append_legacy(
    buf: bytes | bytearray | memoryview, header: BatchHeader, builder: ColumnBuilder,
    start: int, end: int,
) -> None:
    """v0/v1 messages (a compressed wrapper holds several): through the general decoder."""
    timestamp_type = int(header.timestamp_type)
    for r in iter_records(buf, header, max_decompressed_size=MAX_DECOMPRESSED_SIZE):
        if not start <= r.offset < end:
            continue
        if not r.is_valid:
            raise OfflineError(f"message at offset {r.offset} fails its CRC check")
        builder.keys.append(r.key)
        builder.values.append(r.value)
        builder.offsets.append(r.offset)
        builder.timestamps.append(r.timestamp)
        builder.timestamp_types.append(timestamp_type)
        if builder.include_headers:
            builder.headers.append(())


class RangeDecoder:
    """Rows of offsets [start, end) out of whole log entries fed in offset order.

    Shared by the offline reader (entries from segment files) and the live one (entries
    from Fetch responses). Control batches are never rows; with ``set_aborted`` (read
    committed), the batches of aborted transactions are skipped as Kafka's consumer skips
    them: aborted transactions queued by first offset, a producer aborted from there until
    its ABORT marker. ``done`` turns true at the first offset >= end.
    """

    def __init__(self, builder: ColumnBuilder, start: int, end: int) -> None:
        self.builder = builder
        self.start = start
        self.end = end
        self.read_committed = False
        self._queue: list[tuple[int, int]] = []
        self._aborted_producers: set[int] = set()
        self.done = False
        self.next_offset = start

    def set_aborted(self, aborted: list[tuple[int, int]]) -> None:
        """Read committed, with these aborted transactions as (producer_id, first_offset)."""
        self.read_committed = True
        self._queue = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._queue)
        self._aborted_producers = set()

    def entry(self, header: BatchHeader, buf: bytes | bytearray | memoryview) -> None:
        if header.last_offset < self.start:
            return
        if header.base_offset is not None and header.base_offset >= self.end:
            self.done = True
            return
        self.next_offset = max(self.next_offset, header.next_offset)
        header.ensure_valid(buf)
        if self.read_committed and header.has_producer_id:
            queue = self._queue
            while queue and queue[0][0] <= header.last_offset:
                self._aborted_producers.add(heapq.heappop(queue)[1])
            if header.is_control:
                if _is_abort_marker(buf, header):
                    self._aborted_producers.discard(header.producer_id)
                return
            if header.is_transactional and header.producer_id in self._aborted_producers:
                return
        if header.is_control:
            return
        if header.magic == MAGIC_V2:
            past_end = append_v2_batch(buf, header, self.builder, self.start, self.end,
                                       MAX_DECOMPRESSED_SIZE)
            self.done = self.done or past_end or header.last_offset >= self.end - 1
        else:
            _append_legacy(buf, header, self.builder, self.start, self.end)
            self.done = self.done or header.last_offset >= self.end - 1


class _RowCounter:
    """Rows, first and last offset of the batches a reader hands out."""

    def __init__(self) -> None:
        self.rows = 0
        self.first_offset = -1
        self.last_offset = -1

    def flush(self, builder: ColumnBuilder) -> pa.RecordBatch:
        self.rows += len(builder)
        if self.first_offset < 0:
            self.first_offset = builder.first_offset()
        self.last_offset = builder.last_offset()
        return builder.flush()

    def stats(self, builder: ColumnBuilder) -> dict[str, int]:
        return {"rows": self.rows, "bytes": builder.nbytes,
                "first_offset": self.first_offset, "last_offset": self.last_offset}


def read_range(
    files: PartitionFiles,
    start: int,
    end: int,
    *,
    include_headers: bool,
    aborted: tuple[tuple[int, int, int], ...] | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    stats: dict[str, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of offsets [start, end) as Arrow record batches.

    ``aborted`` (not None means read_committed) lists aborted transactions as
    (producer_id, first_offset, last_offset). ``stats``, when given, receives ``rows``,
    ``bytes`` (keys + values), ``first_offset`` and ``last_offset`` of what was read.
    """
    builder = ColumnBuilder(files.topic, files.partition, include_headers)
    decoder = RangeDecoder(builder, start, end)
    if aborted is not None:
        # Only transactions that end at or after the start can still matter.
        decoder.set_aborted([(pid, first) for pid, first, last in aborted if last >= start])
    counter = _RowCounter()
    first_segment = files.segment_index_for(start)
    for seg in range(first_segment, len(files.segment_bases)):
        base = files.segment_bases[seg]
        if base >= end or decoder.done:
            break
        position = _index_position(files, base, start) if seg == first_segment else 0
        for header, buf in iter_entries(files.log_path(base), position):
            decoder.entry(header, buf)
            if len(builder) >= batch_rows:
                yield counter.flush(builder)
            if decoder.done:
                break
    if len(builder):
        yield counter.flush(builder)
    if stats is not None:
        stats.update(counter.stats(builder))


__all__ = [
    "NO_TIMESTAMP",
    "OfflineError",
    "PartitionFiles",
    "RangeDecoder",
    "TxnState",
    "iter_entries",
    "list_partitions",
    "log_end_offset",
    "log_start_offset",
    "offset_for_timestamp",
    "read_range",
    "transaction_state",
]
