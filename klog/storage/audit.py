"""Storage's own checks of a log dir at rest, as findings; and the log dir's one lock.

This module owns the judgement over the files of a log dir that no broker is changing: a
segment's bytes, its three indexes against it, a partition dir's other files (producer
state snapshots, leftovers) and the checkpoint files. Each check reads, changes nothing
and returns ``Finding`` values; ``klog verify`` reports them and ``klog recover`` acts on
them (klog/tools/verify/). The rules are storage's own, not the tools': the scan is
recovery's (``scan.scan_segment``), an index's shape is judged by index_entries.py (the
rules its ``sanity_check`` uses), a batch an index entry names is read by walk.py's
``read_entry_at``. Memory does not grow with a segment's size: the log is walked once, in
bounded chunks, and the batches the offset index names are noted as the walk passes them
(read again, one each, only where no walk ran: a segment recovery trusts).

Severities:

- ``damage``: bytes that fail a check (CRC, sizes, offsets), an index that disagrees with
  its log, a checkpoint that is malformed or beyond the data. ``klog verify`` exits 1.
- ``rebuildable``: a missing index, or one left preallocated (a zero-filled tail) by an
  unclean shutdown. Kafka rebuilds these at startup; the data is intact.
- ``warning``: oddities that lose nothing (checkpoint entries for absent partitions,
  leftover ``.swap``/``.cleaned``/``.deleted`` files, producer state snapshots a broker
  would delete, a log dir held by a running broker).

An active segment's indexes are preallocated while a broker writes them: checked with
``active`` (the last segment of a partition whose log dir a broker holds), their zero
tail is the room for entries to come and no finding, as Kafka's sanity check passes it.

The lock: a broker holds its log dir's ``.lock`` for as long as it runs, and an offline
tool takes it for as long as it reads or writes. Kafka's lock (Java's
FileChannel.tryLock) is a POSIX record lock (fcntl); an flock is a lock of another kind,
and on Linux neither sees the other. So ``lock_log_dir`` (a broker's) and
``log_dir_lock_held`` (a tool's) take both: an flock, and a record lock on the open file
description (F_OFD_SETLK; where that is missing, lockf). An OFD lock conflicts with
Kafka's process lock, with another klog process's and with another descriptor in the
same process, and closing some other descriptor of the file (a tool's check in the
broker's own process) does not release it, as it would a process's lockf. So a klog
broker, Kafka and klog's tools each see the others.

Functions hold no state and are safe to call from any thread on distinct files.

``Any`` below: ``Finding.to_dict`` gives a JSON document (``--json``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

from klog.protocol.errors import KafkaError, RecordTooLargeError
from klog.protocol.records.batch import MAGIC_V2, BatchHeader
from klog.protocol.records.validate import check_batch
from klog.storage import checkpoints as cp
from klog.storage import leader_epoch
from klog.storage.checkpoints import CheckpointError, MetaProperties
from klog.storage.files import (
    INDEX_FILE_SUFFIXES,
    LEFTOVER_FILE_SUFFIXES,
    LOG_FILE_NAME_RE,
    offset_index_file_path,
    producer_snapshot_file_path,
    time_index_file_path,
    txn_index_file_path,
)
from klog.storage.index import OffsetIndex, TimeIndex
from klog.storage.index_entries import (
    ABORTED_TXN_ENTRY,
    ABORTED_TXN_SIZE,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE,
    IndexShape,
    txn_index_shape,
)
from klog.storage.producer_state import CorruptSnapshotError, list_snapshot_offsets, read_snapshot
from klog.storage.scan import SegmentScan, scan_segment
from klog.storage.walk import read_entry_at

DAMAGE = "damage"
REBUILDABLE = "rebuildable"
WARNING = "warning"

TopicPartition = tuple[str, int]
Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a check noticed; ``file`` is a path, ``offset`` / ``position`` locate it."""

    severity: str
    message: str
    partition: str | None = None
    file: str | None = None
    offset: int | None = None
    position: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finding(severity: str, message: str, file: Path | None = None, **where: Any) -> Finding:
    return Finding(severity, message, file=None if file is None else str(file), **where)


# -- the lock -------------------------------------------------------------------------------


class LogDirLockedError(RuntimeError):
    """A log dir's ``.lock`` is held by another process (a broker, Kafka's or klog's, or a
    tool) or by another owner in this one."""


# struct flock for F_OFD_SETLK: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks);
# "0q" pads the end to the alignment the kernel's struct has.
_FLOCK = struct.Struct("@hhqqi0q")
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
_HELD = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)


def _take_locks(fd: int, exclusive: bool) -> None:
    """The flock and the record lock on ``fd``'s file, or OSError (errno in ``_HELD`` when
    someone holds one). A read-only descriptor can take only a shared record lock, which
    still conflicts with a broker's exclusive one."""
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if _OFD_SETLK is not None:
        kind = fcntl.F_WRLCK if exclusive else fcntl.F_RDLCK
        fcntl.fcntl(fd, _OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, 0, 0, 0))
    else:
        fcntl.lockf(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)


class LogDirLock:
    """A log dir's ``.lock`` held by this process until ``release`` (a broker's)."""

    def __init__(self, log_dir: Path, fd: int) -> None:
        self.log_dir = log_dir
        self._fd: int | None = fd

    def release(self) -> None:
        """Let the lock go: closing the descriptor releases both of its locks."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def lock_log_dir(log_dir: Path) -> LogDirLock:
    """Take ``log_dir``'s ``.lock`` (creating the file) for as long as a broker runs on it,
    or raise LogDirLockedError when anyone else holds it."""
    fd = os.open(log_dir / cp.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _take_locks(fd, exclusive=True)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _HELD:
            raise LogDirLockedError(
                f"failed to acquire lock on file {cp.LOCK_FILE} in {log_dir}: a Kafka or klog "
                "instance in another process or thread is using this directory"
            ) from None
        raise
    return LogDirLock(log_dir, fd)


@contextmanager
def log_dir_lock_held(log_dir: Path | None) -> Iterator[None]:
    """Hold ``log_dir``'s ``.lock`` for a block as an offline tool, or raise
    LogDirLockedError when a broker (or another tool) holds it.

    Never creates the file (a dry run changes nothing): a log dir without ``.lock`` has no
    broker, nor has one whose ``.lock`` this user cannot read.
    """
    lock = None if log_dir is None else log_dir / cp.LOCK_FILE
    if lock is None or not lock.is_file():
        yield
        return
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            _take_locks(fd, exclusive=False)
        except OSError as exc:
            if exc.errno in _HELD:
                raise LogDirLockedError(
                    f"{log_dir} is locked ({lock} is held): a broker is running on it; "
                    "stop it first"
                ) from None
            raise
        yield
    finally:
        os.close(fd)


def log_dir_is_locked(log_dir: Path | None) -> bool:
    """True when someone holds ``log_dir``'s ``.lock`` (a running broker, most likely)."""
    try:
        with log_dir_lock_held(log_dir):
            return False
    except LogDirLockedError:
        return True


# -- a partition dir's files ----------------------------------------------------------------


def list_segments(partition_dir: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of every ``<20 digits>.log`` in a partition dir, in order."""
    found = []
    for entry in os.scandir(partition_dir):
        m = LOG_FILE_NAME_RE.match(entry.name)
        if m and entry.is_file():
            found.append((int(m.group(1)), Path(entry.path)))
    found.sort()
    return found


def audit_partition_files(
    partition_dir: Path, *, checkpointed: bool = True, partition: str | None = None
) -> list[Finding]:
    """Leftovers of interrupted operations, index files without their segment, and a dir
    that is not a live partition (``checkpointed`` False: -delete, -future, -stray)."""
    found = []
    logs = {base for base, _log in list_segments(partition_dir)}
    for entry in sorted(os.scandir(partition_dir), key=lambda e: e.name):
        if entry.name.endswith(LEFTOVER_FILE_SUFFIXES):
            found.append(Finding(
                WARNING, "leftover file of an interrupted operation (Kafka finishes or removes "
                "it at startup)", partition, entry.path))
        elif entry.name.endswith(INDEX_FILE_SUFFIXES):
            stem = entry.name.split(".", 1)[0]
            if stem.isdigit() and len(stem) == 20 and int(stem) not in logs:
                found.append(Finding(
                    WARNING, "index file without its .log segment (Kafka deletes it)",
                    partition, entry.path))
    if not checkpointed:
        found.append(_finding(
            WARNING, "partition dir is marked for deletion, a future replica or a stray",
            partition_dir, partition=partition))
    return found


# -- a segment ------------------------------------------------------------------------------


@dataclass(slots=True)
class SegmentAudit:
    """What one read of a segment's ``.log`` found: recovery's scan, the damage where its
    valid bytes end (if they end before the file does), the batches whose records do not
    decode, and the last offset of each batch at a position the offset index names
    (``batch_ends``: what its check needs, so no batch is read twice)."""

    scan: SegmentScan
    damage: Finding | None
    records: list[Finding]
    batch_ends: dict[int, int]


def audit_segment(
    log: Path,
    base_offset: int,
    *,
    max_batch_size: int,
    progress: Progress | None = None,
    partition: str | None = None,
    check_records: bool = True,
) -> SegmentAudit:
    """Recovery's scan of a ``.log`` (sizes, CRCs, offsets from ``base_offset`` on) and the
    records of each v2 batch, in one walk of the file.

    A batch whose CRC holds but whose records do not decode (validate.check_batch's grammar,
    no offset rule: compaction leaves gaps) is damage: consumers cannot read past it.
    Recovery keeps it, as Kafka's does (LogSegment.recover checks sizes and CRCs, never
    records): the bytes are what the producer sent, and cutting there would take every
    later batch with it. A compressed batch is inflated up to the decompression bound,
    beyond which it is a warning (not checked). ``check_records`` False leaves the records
    alone (recovery's own scan: sizes and CRCs only).
    """
    records: list[Finding] = []
    indexed = _indexed_positions(log, base_offset)
    batch_ends: dict[int, int] = {}

    def on_batch(position: int, header: BatchHeader, entry: memoryview) -> None:
        if position in indexed:
            batch_ends[position] = header.last_offset
        if header.magic != MAGIC_V2 or not check_records:
            return
        base = header.base_offset
        try:
            check_batch(entry, replace(header, position=0), from_client=False,
                        offset_rule=False, position=position)
        except RecordTooLargeError as exc:
            records.append(_finding(
                WARNING, f"records of the batch at position {position} not checked: {exc}",
                log, partition=partition, offset=base, position=position))
        except KafkaError as exc:
            records.append(_finding(
                DAMAGE, f"the records of the batch at position {position} (base offset "
                f"{base}) do not decode although its CRC holds: {exc}; consumers cannot "
                "read past it (klog recover keeps it, as Kafka's recovery does)",
                log, partition=partition, offset=base, position=position))

    scan = scan_segment(
        log,
        max_batch_size=max_batch_size,
        verify_crc=True,
        expected_min_offset=base_offset,
        progress=progress,
        on_batch=on_batch,
    )
    damage = None
    if scan.error is not None:
        damage = _finding(
            DAMAGE,
            f"{scan.error}; {scan.truncated_bytes} bytes from position {scan.error_position} "
            "on are invalid",
            log, partition=partition, offset=scan.error_offset, position=scan.error_position,
        )
    return SegmentAudit(scan, damage, records, batch_ends)


def _indexed_positions(log: Path, base_offset: int) -> set[int]:
    """The positions a segment's offset index names (its written entries; none when it is
    missing or unreadable): bounded by the index's size, never the log's."""
    path = offset_index_file_path(log.parent, base_offset)
    try:
        if path.stat().st_size == 0:
            return set()
        index = OffsetIndex(path, base_offset, writable=False)
    except OSError:
        return set()
    try:
        return {entry.position for entry in islice(index.iter_entries(), _checked(index.shape()))}
    finally:
        index.close_handler()


# -- a segment's indexes --------------------------------------------------------------------


def _size_finding(
    kind: str, path: Path, entry_size: int, partition: str | None
) -> Finding | None:
    """Damage when an index file is not a whole number of entries (judged first, as
    Kafka's sanity check does: nothing in such a file is trusted)."""
    size = file_size(path)
    if size % entry_size:
        return _finding(DAMAGE, f"{kind} size {size} is not a multiple of {entry_size}",
                        path, partition=partition)
    return None


def _shape_finding(
    kind: str, path: Path, shape: IndexShape, active: bool, partition: str | None,
    locate: Callable[[tuple[int, ...]], tuple[int | None, int | None]],
) -> Finding | None:
    """What an index's shape says beyond its entries: a fault, or a zero-filled tail (no
    finding for an ``active`` segment's: a broker preallocates it, as Kafka does)."""
    if shape.problem is not None:
        offset, position = (None, None) if shape.bad is None else locate(shape.bad)
        return _finding(DAMAGE, f"{kind} {shape.problem}", path,
                        partition=partition, offset=offset, position=position)
    if shape.preallocated and not active:
        return _finding(
            REBUILDABLE,
            f"{kind} ends in {shape.preallocated} zero entries (preallocated, left by an "
            "unclean shutdown)",
            path, partition=partition,
        )
    return None


def audit_offset_index(
    log: Path,
    base_offset: int,
    valid_bytes: int,
    last_offset: int | None,
    *,
    max_batch_size: int,
    batch_ends: Mapping[int, int] | None = None,
    active: bool = False,
    partition: str | None = None,
) -> Finding | None:
    """The first disagreement between a segment's ``.index`` and its log, if any.

    Kafka's rule: an entry is (offset, position) where position is the start of a batch
    and offset is that batch's last offset (or, after a multi-batch append, a later one
    of the same append), within the segment's ``valid_bytes``; entries strictly increase
    (index_entries.py's rules). A lookup is then correct. ``batch_ends`` (from
    ``audit_segment``'s walk) gives the last offset of the batch at each indexed position;
    without it each named batch is read (and its CRC checked) once. ``active``: the
    segment a running broker appends to, whose preallocated zero tail is no finding.
    """
    path = offset_index_file_path(log.parent, base_offset)
    if not path.exists():
        return _finding(REBUILDABLE, "offset index is missing", path, partition=partition)
    size_fault = _size_finding("offset index", path, OFFSET_INDEX_ENTRY_SIZE, partition)
    if size_fault is not None or file_size(path) == 0:
        return size_fault
    index = OffsetIndex(path, base_offset, writable=False)
    try:
        shape = index.shape()
        fd = os.open(log, os.O_RDONLY)
        try:
            for n, entry in enumerate(islice(index.iter_entries(), _checked(shape))):
                if batch_ends is not None:
                    ends_at = batch_ends.get(entry.position)
                else:
                    header = read_entry_at(fd, entry.position, valid_bytes,
                                           max_batch_size=max_batch_size, whole=True)
                    ends_at = None if header is None else header.last_offset
                where = {"partition": partition, "offset": entry.offset,
                         "position": entry.position}
                if ends_at is None or entry.position >= valid_bytes:
                    return _finding(
                        DAMAGE,
                        f"offset index entry {n} (offset {entry.offset}) points at position "
                        f"{entry.position}, which is not the start of a valid batch",
                        path, **where,
                    )
                if entry.offset < ends_at or (
                    last_offset is not None and entry.offset > last_offset
                ):
                    return _finding(
                        DAMAGE,
                        f"offset index entry {n} says offset {entry.offset} at position "
                        f"{entry.position}, but the batch there ends at offset {ends_at}",
                        path, **where,
                    )
            if shape.problem is not None and shape.usable > 0:
                entry, previous = index.entry(shape.usable), index.entry(shape.usable - 1)
                return _finding(
                    DAMAGE,
                    _does_not_follow("offset index", shape.usable, ("offset", "position"),
                                     entry, previous),
                    path, partition=partition, offset=entry.offset, position=entry.position,
                )
        finally:
            os.close(fd)
    finally:
        index.close_handler()
    return _shape_finding("offset index", path, shape, active, partition,
                          lambda bad: (bad[0], bad[1]))


def _checked(shape: IndexShape) -> int:
    """The entries to check against the log: the written ones, or, when entry 0 is at
    fault, entry 0 (whose fault the log names: no batch there, or one past its offset)."""
    return shape.written if shape.problem is None else max(shape.usable, 1)


def _does_not_follow(
    kind: str, n: int, names: tuple[str, str], entry: tuple[int, int],
    previous: tuple[int, int],
) -> str:
    """An index fault after entry 0, as the audit words it: an entry (the first of a
    zero tail that garbage follows, or the faulty one) that does not follow its
    predecessor (index_entries.py's rules say why)."""
    return (
        f"{kind} entry {n} ({names[0]} {entry[0]}, {names[1]} {entry[1]}) does not follow "
        f"entry {n - 1} ({names[0]} {previous[0]}, {names[1]} {previous[1]})"
    )


def audit_time_index(
    log: Path,
    base_offset: int,
    last_offset: int | None,
    max_timestamp: int | None,
    *,
    active: bool = False,
    partition: str | None = None,
) -> Finding | None:
    """The first problem of a segment's ``.timeindex``: its shape and order, offsets outside
    the segment, timestamps above its max."""
    path = time_index_file_path(log.parent, base_offset)
    if not path.exists():
        return _finding(REBUILDABLE, "time index is missing", path, partition=partition)
    size_fault = _size_finding("time index", path, TIME_INDEX_ENTRY_SIZE, partition)
    if size_fault is not None or file_size(path) == 0:
        return size_fault
    index = TimeIndex(path, base_offset, writable=False)
    try:
        shape = index.shape()
        previous = None
        for n, entry in enumerate(islice(index.iter_entries(), _checked(shape))):
            where = {"partition": partition, "offset": entry.offset}
            if n == shape.unordered and previous is not None:
                return _finding(
                    DAMAGE,
                    f"time index entry {n} (timestamp {entry.timestamp}, offset "
                    f"{entry.offset}) does not follow entry {n - 1} (timestamp "
                    f"{previous.timestamp}, offset {previous.offset})",
                    path, **where,
                )
            if last_offset is None or not base_offset <= entry.offset <= last_offset:
                return _finding(
                    DAMAGE,
                    f"time index entry {n} names offset {entry.offset}, outside the segment's "
                    f"offsets [{base_offset}, {last_offset}]",
                    path, **where,
                )
            if max_timestamp is not None and entry.timestamp > max_timestamp:
                return _finding(
                    DAMAGE,
                    f"time index entry {n} has timestamp {entry.timestamp}, above the "
                    f"segment's max timestamp {max_timestamp}",
                    path, **where,
                )
            previous = entry
        if shape.problem is not None and shape.usable > 0:
            entry, previous = index.entry(shape.usable), index.entry(shape.usable - 1)
            return _finding(
                DAMAGE,
                _does_not_follow("time index", shape.usable, ("timestamp", "offset"), entry,
                                 previous),
                path, partition=partition, offset=entry.offset,
            )
    finally:
        index.close_handler()
    return _shape_finding("time index", path, shape, active, partition,
                          lambda bad: (bad[1], None))


def audit_txn_index(
    log: Path, base_offset: int, last_offset: int | None, *, partition: str | None = None
) -> Finding | None:
    """The first problem of a segment's ``.txnindex`` (absent is normal: no aborted
    transactions): its shape, and entries beyond the segment's last offset."""
    path = txn_index_file_path(log.parent, base_offset)
    if not path.exists():
        return None
    size_fault = _size_finding("transaction index", path, ABORTED_TXN_SIZE, partition)
    if size_fault is not None:
        return size_fault
    data = path.read_bytes()
    shape = txn_index_shape(data, base_offset)
    if last_offset is not None:
        usable = memoryview(data)[: shape.usable * ABORTED_TXN_SIZE]
        for n, (_v, _pid, _first, last, _lso) in enumerate(ABORTED_TXN_ENTRY.iter_unpack(usable)):
            if last > last_offset:
                return _finding(
                    DAMAGE,
                    f"transaction index entry {n} ends at offset {last}, after the segment's "
                    f"last {last_offset}",
                    path, partition=partition, offset=last,
                )
    if shape.bad is not None:
        version, _pid, first, last, _lso = shape.bad
        said = (
            f"has version {version}" if version != 0
            else f"has first offset {first} after last offset {last}" if first > last
            else f"ends at offset {last}, before the segment's base {base_offset}"
            if last < base_offset
            else None
        )
        if said is not None:
            return _finding(DAMAGE, f"transaction index entry {shape.entry} {said}", path,
                            partition=partition, offset=last)
    return _shape_finding("transaction index", path, shape, False, partition,
                          lambda bad: (bad[3], None))


def audit_indexes(
    log: Path,
    base_offset: int,
    valid_bytes: int,
    last_offset: int | None,
    max_timestamp: int | None,
    *,
    max_batch_size: int,
    batch_ends: Mapping[int, int] | None = None,
    active: bool = False,
    partition: str | None = None,
) -> list[Finding]:
    """The findings of a segment's offset and time index (the two a rebuild rewrites)."""
    found = [
        audit_offset_index(log, base_offset, valid_bytes, last_offset,
                           max_batch_size=max_batch_size, batch_ends=batch_ends,
                           active=active, partition=partition),
        audit_time_index(log, base_offset, last_offset, max_timestamp, active=active,
                         partition=partition),
    ]
    return [f for f in found if f is not None]


# -- checkpoints ----------------------------------------------------------------------------


@dataclass(slots=True)
class LogDirCheckpoints:
    """The broker-level checkpoint files of a log dir, as read: None for one absent or
    malformed (its error in ``errors``)."""

    offsets: dict[str, dict[TopicPartition, int] | None] = field(default_factory=dict)
    errors: dict[str, CheckpointError | OSError] = field(default_factory=dict)


def read_log_dir_checkpoints(log_dir: Path | None) -> LogDirCheckpoints:
    result = LogDirCheckpoints()
    if log_dir is None:
        return result
    for name in cp.OFFSET_CHECKPOINT_FILES:
        path = log_dir / name
        if not path.is_file():
            result.offsets[name] = None
            continue
        try:
            result.offsets[name] = cp.read_offset_checkpoint(path)
        except (CheckpointError, OSError) as exc:
            result.offsets[name] = None
            result.errors[name] = exc
    return result


def audit_log_dir_files(
    log_dir: Path, checkpoints: LogDirCheckpoints
) -> tuple[MetaProperties | None, list[Finding]]:
    """meta.properties (as read, if it is) and the findings about the broker-level files."""
    found = [
        _finding(DAMAGE, f"unreadable checkpoint: {exc}", log_dir / name)
        for name, exc in checkpoints.errors.items()
    ]
    meta_path = log_dir / cp.META_PROPERTIES
    meta = None
    if meta_path.is_file():
        try:
            meta = cp.read_meta_properties(meta_path)
        except (CheckpointError, OSError) as exc:
            found.append(_finding(DAMAGE, f"unreadable meta.properties: {exc}", meta_path))
    else:
        found.append(_finding(
            WARNING, "no meta.properties (a broker writes it on first start)", meta_path))
    return meta, found


def audit_checkpoint_partitions(
    log_dir: Path, checkpoints: LogDirCheckpoints, present: set[TopicPartition]
) -> list[Finding]:
    """Checkpoint entries for partitions without a dir in ``log_dir``."""
    found = []
    for name, offsets in checkpoints.offsets.items():
        for key in offsets or {}:
            if key not in present:
                found.append(_finding(
                    WARNING,
                    f"{name} has an entry for {key[0]}-{key[1]}, which has no partition dir here",
                    log_dir / name, partition=f"{key[0]}-{key[1]}"))
    return found


def audit_partition_checkpoints(
    log_dir: Path,
    checkpoints: LogDirCheckpoints,
    key: TopicPartition,
    log_end_offset: int,
    first_base: int | None,
) -> tuple[int | None, list[Finding]]:
    """The partition's log start offset (Kafka's: the checkpoint's, when above the first
    segment's base offset) and what its checkpoint entries say beyond the data."""
    name = f"{key[0]}-{key[1]}"
    log_start = first_base
    lso = (checkpoints.offsets.get(cp.LOG_START_OFFSET_CHECKPOINT) or {}).get(key)
    if lso is not None and first_base is not None and lso > first_base:
        log_start = lso
    found = []
    for file_name, offsets in checkpoints.offsets.items():
        value = (offsets or {}).get(key)
        if value is None:
            continue
        if value > log_end_offset:
            severity = WARNING if file_name == cp.CLEANER_OFFSET_CHECKPOINT else DAMAGE
            found.append(_finding(
                severity,
                f"{file_name} says {value} for {name}, beyond the log end offset {log_end_offset}"
                + ("" if severity == WARNING else ": data the broker had is missing"),
                log_dir / file_name, partition=name, offset=value))
        elif (
            file_name == cp.RECOVERY_POINT_CHECKPOINT
            and first_base is not None
            and value < first_base
        ):
            found.append(_finding(
                WARNING, f"{file_name} says {value} for {name}, below the first segment's base "
                f"offset {first_base}", log_dir / file_name, partition=name, offset=value))
    return log_start, found


def read_leader_epochs(path: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a ``leader-epoch-checkpoint``; CheckpointError for a
    malformed file, as the other checkpoints."""
    try:
        entries = leader_epoch.read_leader_epoch_checkpoint(path)
    except leader_epoch.LeaderEpochCheckpointError as exc:
        raise CheckpointError(path, None, str(exc).removeprefix(f"{path}: ")) from None
    return [(e.epoch, e.start_offset) for e in entries]


def leader_epoch_problem(
    entries: list[tuple[int, int]], log_end_offset: int | None
) -> tuple[str, int] | None:
    """(message, offset) of the first broken rule: epochs and start offsets increase, none
    negative, none beyond the log end offset."""
    previous: tuple[int, int] | None = None
    for epoch, start in entries:
        if previous is not None and (epoch <= previous[0] or start < previous[1]):
            return (
                f"leader epoch {epoch} at offset {start} does not follow epoch "
                f"{previous[0]} at offset {previous[1]}",
                start,
            )
        if epoch < 0 or start < 0:
            return f"leader epoch entry ({epoch}, {start}) is negative", start
        if log_end_offset is not None and start > log_end_offset:
            return (
                f"leader epoch {epoch} starts at offset {start}, beyond the log end offset "
                f"{log_end_offset}",
                start,
            )
        previous = (epoch, start)
    return None


def audit_leader_epochs(
    partition_dir: Path, log_end_offset: int | None, *, partition: str | None = None
) -> list[Finding]:
    """What is wrong with a partition's ``leader-epoch-checkpoint`` (absent is normal)."""
    path = partition_dir / cp.LEADER_EPOCH_CHECKPOINT
    if not path.is_file():
        return []
    try:
        entries = read_leader_epochs(path)
    except (CheckpointError, OSError) as exc:
        return [_finding(DAMAGE, f"unreadable leader epoch checkpoint: {exc}", path,
                         partition=partition)]
    problem = leader_epoch_problem(entries, log_end_offset)
    if problem is None:
        return []
    return [_finding(DAMAGE, problem[0], path, partition=partition, offset=problem[1])]


def audit_producer_snapshots(
    partition_dir: Path, log_end_offset: int | None, *, partition: str | None = None
) -> list[Finding]:
    """What is wrong with a partition's producer state snapshots (``<offset>.snapshot``):
    one that does not parse (version, CRC, size), or one taken beyond the log end offset.
    Warnings: a broker deletes such a snapshot at startup and rebuilds producer state from
    the log (Kafka's ProducerStateManager), so nothing is lost."""
    found = []
    for offset in list_snapshot_offsets(partition_dir):
        path = producer_snapshot_file_path(partition_dir, offset)
        try:
            read_snapshot(path)
        except (CorruptSnapshotError, KafkaError, OSError) as exc:
            found.append(_finding(
                WARNING, f"unreadable producer state snapshot ({exc}); a broker deletes it and "
                "rebuilds producer state from the log", path, partition=partition,
                offset=offset))
            continue
        if log_end_offset is not None and offset > log_end_offset:
            found.append(_finding(
                WARNING, f"producer state snapshot at offset {offset} is beyond the log end "
                f"offset {log_end_offset} (a broker deletes it at startup)", path,
                partition=partition, offset=offset))
    return found


def file_size(path: Path) -> int:
    """The size of ``path``, 0 when it cannot be read."""
    with contextlib.suppress(OSError):
        return path.stat().st_size
    return 0
