"""Offline checks and repairs of Kafka log dirs: the logic behind ``klog verify`` / ``recover``.

This module owns the *judgement* over a log dir at rest: which bytes are damage, which
files are merely rebuildable, and what a broker's startup recovery would do about them.
It works on one of three targets, detected from the path:

- a segment file (``00000000000000000000.log``: a 20-digit base offset, in a partition dir;
  its indexes are looked for beside it),
- a partition dir (``<topic>-<partition>``; broker checkpoints are read from its parent
  when the parent is a log dir),
- a log dir (meta.properties or the broker-level checkpoint files, or partition dirs that
  hold segments).

Anything else is refused (InspectError) unless the caller forces it: ``recover`` truncates
and rewrites what it takes for a segment, so an application's ``app.log`` or a directory
that merely holds a ``.log`` must never be taken for one by accident.

Scanning is the storage core's (``scan.scan_segment`` / ``scan.rebuild_indexes``);
index files are read through ``index.py``; checkpoints through ``checkpoints.py``. Memory
does not grow with segment size: segments are scanned by the core in bounded chunks, and an
index entry is checked by reading the one batch it points at.

Severities:

- ``damage``: bytes that fail a check (CRC, sizes, offsets), an index that disagrees with
  its log, a checkpoint that is malformed or beyond the data. ``verify`` exits 1.
- ``rebuildable``: a missing index, or one left preallocated (zero-filled tail) by an
  unclean shutdown. Kafka rebuilds these at startup; the data is intact.
- ``warning``: oddities that lose nothing (checkpoint entries for absent partitions,
  leftover ``.swap``/``.cleaned``/``.deleted`` files, a log dir held by a running broker).

``recover`` does what a broker does at startup, as a tool, except that it never destroys
data: invalid bytes cut from a segment are saved beside it
(``<segment>.log.truncated-at-<position>.bin``), segments after a damaged one are moved
aside (``<segment>.log.orphaned``) instead of deleted, a checkpoint file is copied
aside (``<name>.before-recover``) before it is rewritten, and an index found damaged is
moved aside (``<segment>.index.before-recover``) before a new one is built. Only an index
that is missing or whose sole fault is a preallocated zero-filled tail is rewritten in
place: the rebuilt file says everything it said. Saved files are never overwritten: a
counter is added. Running it twice changes nothing the second time.

A batch whose CRC holds but whose records do not decode (a record length beyond the batch,
an unknown codec, a compressed section that does not inflate: what a broker without record
validation stored from a hostile producer) is ``damage`` to ``verify``: consumers cannot
read past it. ``recover`` keeps it, as Kafka's recovery does (LogSegment.recover checks each
batch with ensureValid, i.e. sizes and CRC, never its records): the bytes are what the
producer sent, and cutting there would take every later batch of the segment with it.
To let consumers past it, delete the records up to its last offset (DeleteRecords).

Not thread-safe and not meant to run beside a broker: ``recover`` holds the log dir's
``.lock`` (flock and POSIX lock, as Kafka's FileChannel.tryLock takes the latter) for its
whole run and refuses to start if a broker holds it.

``Any`` below: the reports' ``to_dict`` give JSON documents (``--json``), whose values are
of every JSON type; ``**where``/``**fields`` are a Finding's or an Action's keyword fields.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import re
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from klog.protocol.errors import CorruptRecordError, KafkaError, RecordTooLargeError
from klog.protocol.records.batch import (
    DEFAULT_MAX_BATCH_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    read_batch_header,
)
from klog.protocol.records.validate import check_batch
from klog.storage import checkpoints as cp
from klog.storage.checkpoints import CheckpointError, MetaProperties
from klog.storage.files import (
    INDEX_FILE_SUFFIX,
    INDEX_FILE_SUFFIXES,
    LEFTOVER_FILE_SUFFIXES,
    LOG_FILE_NAME_RE,
    LOG_FILE_SUFFIX,
    SEGMENT_COMPANION_FILE_NAME_RE,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
)
from klog.storage.index import (
    ABORTED_TXN_SIZE,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE,
    OffsetIndex,
    TimeIndex,
    read_txn_index_entries,
)

if TYPE_CHECKING:
    from klog.storage.scan import SegmentScan

DAMAGE = "damage"
REBUILDABLE = "rebuildable"
WARNING = "warning"

STATUS_OK = "ok"
STATUS_DAMAGED = "damaged"
STATUS_REBUILDABLE = "rebuildable"

KIND_SEGMENT = "segment"
KIND_PARTITION = "partition"
KIND_LOG_DIR = "log_dir"

# <topic>-<partition>, optionally with the suffix Kafka gives dirs awaiting deletion, future
# replicas (alter-log-dirs) and strays: "<topic>-<p>.<32 hex>-delete". A topic name is
# Kafka's legal characters only, at most 249 of them (Topic.validate).
_PARTITION_RE = re.compile(
    r"^([a-zA-Z0-9._-]{1,249})-([0-9]+)(?:\.([0-9a-f]{32})-(delete|future|stray))?$"
)
_LOG_OVERHEAD = struct.Struct(">qi")

Progress = Callable[[int], None]


class InspectError(Exception):
    """The path is not something verify/recover works on (a usage error, exit 2)."""


class LogDirLockedError(Exception):
    """The log dir's ``.lock`` is held: a broker is running on it."""


# --------------------------------------------------------------------------- report types


@dataclass(slots=True)
class Finding:
    """One thing verify noticed; ``file`` is a path, ``offset`` / ``position`` locate it."""

    severity: str
    message: str
    partition: str | None = None
    file: str | None = None
    offset: int | None = None
    position: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class SegmentReport:
    file: str
    base_offset: int
    size: int
    valid_bytes: int
    batches: int
    records: int
    first_offset: int | None
    last_offset: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class PartitionReport:
    """What verify found in one partition (or the one segment it was given)."""

    name: str
    path: str
    topic: str | None
    partition: int | None
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    status: str = STATUS_OK
    segments: list[SegmentReport] = field(default_factory=list)

    @property
    def batches(self) -> int:
        return sum(s.batches for s in self.segments)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "topic": self.topic,
            "partition": self.partition,
            "segments": len(self.segments),
            "batches": self.batches,
            "records": self.records,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "status": self.status,
            "segment_details": [s.to_dict() for s in self.segments],
        }


@dataclass(slots=True)
class VerifyReport:
    path: str
    kind: str
    partitions: list[PartitionReport] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    meta: MetaProperties | None = None

    @property
    def damaged(self) -> bool:
        return any(f.severity == DAMAGE for f in self.findings)

    @property
    def status(self) -> str:
        if self.damaged:
            return STATUS_DAMAGED
        if any(f.severity == REBUILDABLE for f in self.findings):
            return STATUS_REBUILDABLE
        return STATUS_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "status": self.status,
            "meta": None if self.meta is None else asdict(self.meta),
            "partitions": [p.to_dict() for p in self.partitions],
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(slots=True)
class Action:
    """One change recover made (or, in a dry run, would make)."""

    # truncate | orphan | save-index | rebuild-index | correct-checkpoint | replace-checkpoint
    kind: str
    message: str
    partition: str | None = None
    file: str | None = None
    position: int | None = None
    bytes: int | None = None
    saved_as: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class PartitionRecovery:
    name: str
    recovered_from: int
    log_end_offset: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class RecoveryReport:
    path: str
    kind: str
    dry_run: bool
    actions: list[Action] = field(default_factory=list)
    partitions: list[PartitionRecovery] = field(default_factory=list)
    unresolved: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "dry_run": self.dry_run,
            "actions": [a.to_dict() for a in self.actions],
            "partitions": [p.to_dict() for p in self.partitions],
            "unresolved": [f.to_dict() for f in self.unresolved],
        }


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True, slots=True)
class PartitionDir:
    path: Path
    topic: str | None
    partition: int | None
    # False for "-delete"/"-future"/"-stray" dirs: broker checkpoints do not describe them.
    checkpointed: bool = True

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def key(self) -> tuple[str, int] | None:
        if self.topic is None or self.partition is None or not self.checkpointed:
            return None
        return self.topic, self.partition


@dataclass(frozen=True, slots=True)
class Target:
    """What a path turned out to be."""

    path: Path
    kind: str
    partitions: tuple[PartitionDir, ...]
    log_dir: Path | None  # where the broker-level checkpoints live, if anywhere
    segment: Path | None = None

    def log_files(self) -> list[Path]:
        if self.segment is not None:
            return [self.segment]
        return [log for p in self.partitions for _base, log in list_segments(p.path)]

    def total_log_bytes(self) -> int:
        return sum(_size(log) for log in self.log_files())


def _partition_dir(path: Path) -> PartitionDir:
    m = _PARTITION_RE.match(path.name)
    if m is None:
        return PartitionDir(path, None, None, False)
    return PartitionDir(path, m.group(1), int(m.group(2)), m.group(4) is None)


def _is_log_dir(path: Path) -> bool:
    names = {cp.META_PROPERTIES, *cp.OFFSET_CHECKPOINT_FILES}
    return any((path / n).is_file() for n in names)


def _has_segments(path: Path) -> bool:
    try:
        return any(LOG_FILE_NAME_RE.match(e.name) and e.is_file() for e in os.scandir(path))
    except OSError:
        return False


def list_segments(partition_path: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of every ``<20 digits>.log`` in a partition dir, in order."""
    found = []
    for entry in os.scandir(partition_path):
        m = LOG_FILE_NAME_RE.match(entry.name)
        if m and entry.is_file():
            found.append((int(m.group(1)), Path(entry.path)))
    found.sort()
    return found


_FORCE_HINT = "--force acts on it anyway"
_EXPECTED = (
    "expected a <20-digit base offset>.log segment in a <topic>-<partition> dir, a "
    "partition dir or a log dir"
)


def resolve_target(path: Path | str, *, force: bool = False) -> Target:
    """Decide whether ``path`` is a segment file, a partition dir or a log dir.

    Only what is named and laid out as Kafka does is accepted: a ``<20 digits>.log`` in a
    ``<topic>-<partition>`` dir; a ``<topic>-<partition>`` dir; a dir holding
    meta.properties or broker checkpoints, or partition dirs with segments in them.
    Anything else raises InspectError, so that ``recover`` never truncates a file it has
    not recognised. ``force`` accepts any ``.log`` file as a segment (base offset 0 when
    its name is not one) and any dir as a partition dir or log dir, as the user asked.
    """
    # Absolute (not resolved: symlinks stay as given) so that "." has a name to match.
    path = Path(os.path.abspath(path))
    if not path.exists():
        raise InspectError(f"{path}: no such file or directory")
    if path.is_file():
        return _segment_target(path, force)
    if not path.is_dir():
        raise InspectError(f"{path}: not a regular file or directory")
    try:
        children = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as exc:
        raise InspectError(f"{path}: cannot list directory ({exc.strerror})") from None
    subdirs = [Path(e.path) for e in children if e.is_dir() and _PARTITION_RE.match(e.name)]
    has_segments = any(LOG_FILE_NAME_RE.match(e.name) for e in children if e.is_file())
    if _is_log_dir(path) or (
        # Without broker files, partition dirs make a log dir only when they hold
        # segments: a dir with some "<name>-<digits>" subdir (python-3) is not one.
        not has_segments
        and (bool(subdirs) if force else any(_has_segments(d) for d in subdirs))
    ):
        parts = tuple(_partition_dir(p) for p in subdirs)
        return Target(path, KIND_LOG_DIR, parts, path)
    if _PARTITION_RE.match(path.name) or (force and has_segments):
        log_dir = path.parent if _is_log_dir(path.parent) else None
        return Target(path, KIND_PARTITION, (_partition_dir(path),), log_dir)
    if has_segments:
        raise InspectError(
            f"{path}: holds .log segments but is not a partition dir (<topic>-<partition>) "
            f"nor a log dir; {_FORCE_HINT}"
        )
    raise InspectError(
        f"{path}: not a log dir, partition dir or segment file (no meta.properties or "
        f"checkpoint files, no <topic>-<partition> dirs with segments); {_FORCE_HINT}"
    )


def _segment_target(path: Path, force: bool) -> Target:
    pdir = _partition_dir(path.parent)
    log_dir = path.parent.parent if _is_log_dir(path.parent.parent) else None
    target = Target(path, KIND_SEGMENT, (pdir,), log_dir, path)
    if force and path.name.endswith(LOG_FILE_SUFFIX):
        return target
    if SEGMENT_COMPANION_FILE_NAME_RE.match(path.name):
        raise InspectError(
            f"{path}: an index or snapshot file; give its segment "
            f"({path.name.split('.', 1)[0]}{LOG_FILE_SUFFIX}) or the partition dir"
        )
    if not LOG_FILE_NAME_RE.match(path.name):
        hint = "" if not path.name.endswith(LOG_FILE_SUFFIX) else f"; {_FORCE_HINT}"
        raise InspectError(f"{path}: not a Kafka segment file ({_EXPECTED}){hint}")
    if pdir.topic is None:
        raise InspectError(
            f"{path}: not in a partition dir (its dir {path.parent.name!r} is not named "
            f"<topic>-<partition>); {_FORCE_HINT}"
        )
    return target


def _as_target(path: Path | str | Target, force: bool = False) -> Target:
    return path if isinstance(path, Target) else resolve_target(path, force=force)


# --------------------------------------------------------------------------- locking


def _lock_owner_dir(target: Target) -> Path | None:
    if target.kind == KIND_LOG_DIR:
        return target.path
    # A partition's log dir is its parent (with or without checkpoint files yet).
    pdir = target.partitions[0].path
    return pdir.parent


@contextmanager
def _held_lock(log_dir: Path | None) -> Iterator[None]:
    """Hold the log dir's ``.lock`` like a broker would, or raise LogDirLockedError.

    Never creates the file (a dry run changes nothing): a log dir without ``.lock`` has no
    broker. Takes both lock kinds: Kafka (Java FileChannel.tryLock) holds a POSIX record
    lock, a klog broker holds an flock; each is invisible to the other kind on Linux.
    """
    lock = None if log_dir is None else log_dir / cp.LOCK_FILE
    if lock is None or not lock.is_file():
        yield
        return
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        yield  # unreadable lock file: nobody we can detect
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # A shared POSIX lock conflicts with the broker's exclusive one and needs only
            # read access.
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise LogDirLockedError(
                    f"{log_dir} is locked ({lock} is held): a broker is running on it; "
                    "stop it first"
                ) from None
            raise
        yield
    finally:
        os.close(fd)  # releases both locks


def held_lock(log_dir: Path | None) -> contextlib.AbstractContextManager[None]:
    """Hold ``log_dir``'s ``.lock`` as a broker would for a block, or raise
    LogDirLockedError: the check every offline tool that writes makes (recover, compact)."""
    return _held_lock(log_dir)


def log_dir_is_locked(path: Path | str) -> bool:
    """True when a broker holds the ``.lock`` of the log dir that ``path`` belongs to."""
    try:
        with _held_lock(_lock_owner_dir(_as_target(path))):
            return False
    except LogDirLockedError:
        return True


# --------------------------------------------------------------------------- small readers


def _read_batch_at(
    fh: BinaryIO, position: int, limit: int, max_batch_size: int
) -> BatchHeader | None:
    """The valid (CRC-checked) batch starting exactly at ``position``, else None.

    Reads that one batch only, after checking its length against ``limit`` (the end of
    the scanned valid bytes), so nothing is allocated from an untrusted length.
    """
    if position < 0 or position + LOG_OVERHEAD > limit:
        return None
    fh.seek(position)
    head = fh.read(LOG_OVERHEAD)
    if len(head) < LOG_OVERHEAD:
        return None
    _offset, length = _LOG_OVERHEAD.unpack(head)
    if length <= 0 or length > max_batch_size or position + LOG_OVERHEAD + length > limit:
        return None
    body = fh.read(length)
    if len(body) < length:
        return None
    buf = head + body
    try:
        header = read_batch_header(buf, 0, max_batch_size=max_batch_size)
    except CorruptRecordError:
        return None
    return header if header.is_valid(buf) else None


def undecodable_batches(log: Path, valid_bytes: int, max_batch_size: int) -> list[_Problem]:
    """The v2 batches among the first ``valid_bytes`` of ``log`` (scanned: sizes and CRCs
    hold) whose records do not decode (validate.check_batch's grammar, no offset rule:
    compaction leaves gaps). One batch is read at a time; a compressed one is inflated up
    to the decompression bound, beyond which it is a warning (not checked)."""
    problems: list[_Problem] = []
    with open(log, "rb") as fh:
        position = 0
        while position + LOG_OVERHEAD <= valid_bytes:
            fh.seek(position)
            head = fh.read(LOG_OVERHEAD)
            base_offset, length = _LOG_OVERHEAD.unpack(head)
            end = position + LOG_OVERHEAD + length
            if length <= 0 or length > max_batch_size or end > valid_bytes:
                break  # the scan said otherwise: the file changed under us
            buf = head + fh.read(length)
            try:
                header = read_batch_header(buf, 0, max_batch_size=max_batch_size)
                if header.magic == MAGIC_V2:
                    check_batch(buf, header, from_client=False, offset_rule=False,
                                position=position)
            except RecordTooLargeError as exc:
                problems.append(_Problem(
                    WARNING, f"records of the batch at position {position} not checked: "
                    f"{exc}", base_offset, position))
            except KafkaError as exc:
                problems.append(_Problem(
                    DAMAGE, f"the records of the batch at position {position} (base offset "
                    f"{base_offset}) do not decode although its CRC holds: {exc}; consumers "
                    "cannot read past it (klog recover keeps it, as Kafka's recovery does)",
                    base_offset, position))
            position = end
    return problems


def read_leader_epoch_entries(path: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a ``leader-epoch-checkpoint`` (read-only).

    Read through ``leader_epoch.py`` (the owner of that file) when it is there; otherwise
    with the shared checkpoint framing: version 0, count, ``epoch start_offset`` lines.
    Raises CheckpointError for a malformed file.
    """
    try:
        from klog.storage import leader_epoch
    except ImportError:
        leader_epoch = None  # type: ignore[assignment]  # a module name, None when absent
    if leader_epoch is not None:
        try:
            entries = leader_epoch.read_leader_epoch_checkpoint(path)
        except leader_epoch.LeaderEpochCheckpointError as exc:
            raise CheckpointError(path, None, str(exc).removeprefix(f"{path}: ")) from None
        return [(e.epoch, e.start_offset) for e in entries]

    def parse(line: str) -> tuple[int, int] | None:
        parts = line.split()
        if len(parts) != 2:
            return None
        epoch, start = cp.parse_int(parts[0], 32), cp.parse_int(parts[1], 64)
        return None if epoch is None or start is None else (epoch, start)

    return cp.read_checkpoint_entries(path, 0, parse)


def write_leader_epoch_entries(path: Path, entries: list[tuple[int, int]]) -> None:
    """Write a ``leader-epoch-checkpoint`` atomically (through leader_epoch.py if there)."""
    try:
        from klog.storage import leader_epoch
    except ImportError:
        cp.write_checkpoint_lines(path, 0, [f"{e} {s}" for e, s in entries])
        return
    leader_epoch.write_leader_epoch_checkpoint(
        path, [leader_epoch.EpochEntry(e, s) for e, s in entries]
    )


def _aside_name(path: Path, suffix: str) -> Path:
    """``path`` + suffix, with a counter when that name is taken: never overwrite."""
    candidate = path.with_name(path.name + suffix)
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}{suffix}.{n}")
        n += 1
    return candidate


def _truncated_name(log: Path, position: int) -> Path:
    base = log.with_name(f"{log.name}.truncated-at-{position}.bin")
    n = 1
    while base.exists():
        base = log.with_name(f"{log.name}.truncated-at-{position}.{n}.bin")
        n += 1
    return base


def index_file(log: Path, base_offset: int, suffix: str) -> Path:
    """The index file of a segment: named after its base offset, as Kafka (and
    ``scan.rebuild_indexes``) name it, whatever the .log is called."""
    return log.with_name(filename_prefix_from_offset(base_offset) + suffix)


# --------------------------------------------------------------------------- index checks


@dataclass(slots=True)
class _Problem:
    severity: str
    message: str
    offset: int | None = None
    position: int | None = None


_E = TypeVar("_E")


def _zero_tail(entries: Iterator[_E], first_zero: bool, is_zero: Callable[[_E], bool]) -> int:
    """Count the rest of ``entries`` if all are zero (first included), else -1."""
    count = 1 if first_zero else 0
    if not first_zero:
        return -1
    for entry in entries:
        if not is_zero(entry):
            return -1
        count += 1
    return count


def check_offset_index(
    log: Path,
    base_offset: int,
    valid_bytes: int,
    last_offset: int | None,
    max_batch_size: int,
) -> _Problem | None:
    """The first disagreement between ``<segment>.index`` and its log, if any.

    Kafka's rule: an entry is (offset, position) where position is the start of a batch
    and offset is that batch's last offset (or, after a multi-batch append, a later one
    of the same append); entries strictly increase. A lookup is then correct.
    """
    path = index_file(log, base_offset, INDEX_FILE_SUFFIX)
    if not path.exists():
        return _Problem(REBUILDABLE, "offset index is missing")
    size = path.stat().st_size
    if size % OFFSET_INDEX_ENTRY_SIZE:
        return _Problem(DAMAGE, f"offset index size {size} is not a multiple of 8")
    if size == 0:
        return None
    index = OffsetIndex(path, base_offset, writable=False)
    try:
        with open(log, "rb") as fh:
            entries = index.iter_entries()
            previous = None
            for n, entry in enumerate(entries):
                if previous is not None and (
                    entry.offset <= previous.offset or entry.position <= previous.position
                ):
                    zeros = _zero_tail(
                        entries,
                        entry.offset == base_offset and entry.position == 0,
                        lambda e: e.offset == base_offset and e.position == 0,
                    )
                    if zeros > 0:
                        return _Problem(
                            REBUILDABLE,
                            f"offset index ends in {zeros} zero entries (preallocated, "
                            "left by an unclean shutdown)",
                        )
                    return _Problem(
                        DAMAGE,
                        f"offset index entry {n} (offset {entry.offset}, position "
                        f"{entry.position}) does not follow entry {n - 1} (offset "
                        f"{previous.offset}, position {previous.position})",
                        entry.offset,
                        entry.position,
                    )
                header = _read_batch_at(fh, entry.position, valid_bytes, max_batch_size)
                if header is None:
                    return _Problem(
                        DAMAGE,
                        f"offset index entry {n} (offset {entry.offset}) points at position "
                        f"{entry.position}, which is not the start of a valid batch",
                        entry.offset,
                        entry.position,
                    )
                if entry.offset < header.last_offset or (
                    last_offset is not None and entry.offset > last_offset
                ):
                    return _Problem(
                        DAMAGE,
                        f"offset index entry {n} says offset {entry.offset} at position "
                        f"{entry.position}, but the batch there ends at offset "
                        f"{header.last_offset}",
                        entry.offset,
                        entry.position,
                    )
                previous = entry
    finally:
        index.close_handler()
    return None


def check_time_index(
    log: Path, base_offset: int, last_offset: int | None, max_timestamp: int | None
) -> _Problem | None:
    """The first problem of ``<segment>.timeindex``: order, offsets outside the segment."""
    path = index_file(log, base_offset, TIME_INDEX_FILE_SUFFIX)
    if not path.exists():
        return _Problem(REBUILDABLE, "time index is missing")
    size = path.stat().st_size
    if size % TIME_INDEX_ENTRY_SIZE:
        return _Problem(DAMAGE, f"time index size {size} is not a multiple of 12")
    if size == 0:
        return None
    index = TimeIndex(path, base_offset, writable=False)
    try:
        entries = index.iter_entries()
        previous = None
        for n, entry in enumerate(entries):
            if previous is not None and (
                entry.timestamp <= previous.timestamp or entry.offset < previous.offset
            ):
                zeros = _zero_tail(
                    entries,
                    entry.timestamp == 0 and entry.offset == base_offset,
                    lambda e: e.timestamp == 0 and e.offset == base_offset,
                )
                if zeros > 0:
                    return _Problem(
                        REBUILDABLE,
                        f"time index ends in {zeros} zero entries (preallocated, left by an "
                        "unclean shutdown)",
                    )
                return _Problem(
                    DAMAGE,
                    f"time index entry {n} (timestamp {entry.timestamp}, offset "
                    f"{entry.offset}) does not follow entry {n - 1} (timestamp "
                    f"{previous.timestamp}, offset {previous.offset})",
                    entry.offset,
                )
            if last_offset is None or not base_offset <= entry.offset <= last_offset:
                return _Problem(
                    DAMAGE,
                    f"time index entry {n} names offset {entry.offset}, outside the segment's "
                    f"offsets [{base_offset}, {last_offset}]",
                    entry.offset,
                )
            if max_timestamp is not None and entry.timestamp > max_timestamp:
                return _Problem(
                    DAMAGE,
                    f"time index entry {n} has timestamp {entry.timestamp}, above the "
                    f"segment's max timestamp {max_timestamp}",
                    entry.offset,
                )
            previous = entry
    finally:
        index.close_handler()
    return None


def check_txn_index(log: Path, base_offset: int, last_offset: int | None) -> _Problem | None:
    """Sanity of ``<segment>.txnindex`` (absent is normal: no aborted transactions)."""
    path = index_file(log, base_offset, TXN_INDEX_FILE_SUFFIX)
    if not path.exists():
        return None
    size = path.stat().st_size
    if size % ABORTED_TXN_SIZE:
        return _Problem(DAMAGE, f"transaction index size {size} is not a multiple of 34")
    for n, txn in enumerate(read_txn_index_entries(path)):
        bad = None
        if txn.version != 0:
            bad = f"has version {txn.version}"
        elif txn.first_offset > txn.last_offset:
            bad = f"has first offset {txn.first_offset} after last offset {txn.last_offset}"
        elif txn.last_offset < base_offset:
            bad = f"ends at offset {txn.last_offset}, before the segment's base {base_offset}"
        elif last_offset is not None and txn.last_offset > last_offset:
            bad = f"ends at offset {txn.last_offset}, after the segment's last {last_offset}"
        if bad:
            return _Problem(DAMAGE, f"transaction index entry {n} {bad}", txn.last_offset)
    return None


def _index_problems(
    log: Path,
    base: int,
    valid_bytes: int,
    last_offset: int | None,
    max_timestamp: int | None,
    max_batch_size: int,
) -> list[tuple[Path, _Problem]]:
    """(index file, problem) for each of the segment's offset and time index at fault."""
    found = []
    problem = check_offset_index(log, base, valid_bytes, last_offset, max_batch_size)
    if problem is not None:
        found.append((index_file(log, base, INDEX_FILE_SUFFIX), problem))
    problem = check_time_index(log, base, last_offset, max_timestamp)
    if problem is not None:
        found.append((index_file(log, base, TIME_INDEX_FILE_SUFFIX), problem))
    return found


# --------------------------------------------------------------------------- verify


@dataclass(slots=True)
class _Checkpoints:
    """The broker-level checkpoint files of a log dir, as read (None = absent/malformed)."""

    offsets: dict[str, dict[tuple[str, int], int] | None] = field(default_factory=dict)
    errors: dict[str, CheckpointError | OSError] = field(default_factory=dict)


def _read_checkpoints(log_dir: Path | None) -> _Checkpoints:
    result = _Checkpoints()
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


class _Verifier:
    def __init__(self, target: Target, max_batch_size: int, progress: Progress | None) -> None:
        self.target = target
        self.max_batch_size = max_batch_size
        self.progress = progress
        self.report = VerifyReport(str(target.path), target.kind)

    def add(self, severity: str, message: str, **where: Any) -> None:
        file = where.pop("file", None)
        self.report.findings.append(
            Finding(severity, message, file=None if file is None else str(file), **where)
        )

    def _scan(self, log: Path, expected_min_offset: int | None) -> SegmentScan:
        from klog.storage.scan import scan_segment

        return scan_segment(
            log,
            max_batch_size=self.max_batch_size,
            verify_crc=True,
            expected_min_offset=expected_min_offset,
            progress=self.progress,
        )

    def run(self) -> VerifyReport:
        target = self.target
        self._check_lock()
        checkpoints = _read_checkpoints(target.log_dir if target.kind != KIND_SEGMENT else None)
        if target.kind == KIND_LOG_DIR:
            self._check_log_dir_files(checkpoints)
        for pdir in target.partitions:
            self.report.partitions.append(self._partition(pdir, checkpoints))
        if target.kind == KIND_LOG_DIR:
            present = {p.key for p in target.partitions if p.key is not None}
            for name, offsets in checkpoints.offsets.items():
                for key in (offsets or {}):
                    if key not in present:
                        self.add(
                            WARNING,
                            f"{name} has an entry for {key[0]}-{key[1]}, which has no "
                            "partition dir here",
                            file=target.path / name,
                            partition=f"{key[0]}-{key[1]}",
                        )
        self._set_statuses()
        return self.report

    def _check_lock(self) -> None:
        try:
            with _held_lock(_lock_owner_dir(self.target)):
                pass
        except LogDirLockedError as exc:
            self.add(WARNING, f"{exc}; active segments may change while being read")

    def _check_log_dir_files(self, checkpoints: _Checkpoints) -> None:
        root = self.target.path
        for name, exc in checkpoints.errors.items():
            self.add(DAMAGE, f"unreadable checkpoint: {exc}", file=root / name)
        meta_path = root / cp.META_PROPERTIES
        if meta_path.is_file():
            try:
                self.report.meta = cp.read_meta_properties(meta_path)
            except (CheckpointError, OSError) as exc:
                self.add(DAMAGE, f"unreadable meta.properties: {exc}", file=meta_path)
        else:
            self.add(WARNING, "no meta.properties (a broker writes it on first start)",
                     file=meta_path)

    def _set_statuses(self) -> None:
        by_partition: dict[str, set[str]] = {}
        for f in self.report.findings:
            if f.partition is not None:
                by_partition.setdefault(f.partition, set()).add(f.severity)
        for p in self.report.partitions:
            severities = by_partition.get(p.name, set())
            if DAMAGE in severities:
                p.status = STATUS_DAMAGED
            elif REBUILDABLE in severities:
                p.status = STATUS_REBUILDABLE

    def _partition(self, pdir: PartitionDir, checkpoints: _Checkpoints) -> PartitionReport:
        target = self.target
        name = pdir.name
        report = PartitionReport(name, str(pdir.path), pdir.topic, pdir.partition)
        if target.segment is not None:
            m = LOG_FILE_NAME_RE.match(target.segment.name)
            segments = [(int(m.group(1)) if m else 0, target.segment)]
            if not m:
                self.add(WARNING, "segment file name is not a 20-digit base offset; assuming 0",
                         partition=name, file=target.segment)
        else:
            segments = list_segments(pdir.path)
            self._check_partition_files(pdir)
        prev_last: int | None = None
        damaged_at: tuple[Path, int | None] | None = None
        leo: int | None = None
        for i, (base, log) in enumerate(segments):
            if damaged_at is not None:
                self.add(
                    DAMAGE,
                    f"segment follows damaged data ({damaged_at[0].name} at position "
                    f"{damaged_at[1]}); a broker would delete it, klog recover moves it aside",
                    partition=name, file=log, offset=base, position=0,
                )
                if self.progress:
                    self.progress(_size(log))
                continue
            if prev_last is not None and base <= prev_last:
                self.add(
                    DAMAGE,
                    f"segment base offset {base} is not above the previous segment's last "
                    f"offset {prev_last}",
                    partition=name, file=log, offset=base, position=0,
                )
                damaged_at = (log, 0)
                if self.progress:
                    self.progress(_size(log))
                continue
            scan = self._scan(log, base)
            report.segments.append(
                SegmentReport(str(log), base, scan.file_size, scan.valid_bytes, scan.batches,
                              scan.records, scan.first_offset, scan.last_offset)
            )
            if scan.error is not None:
                self.add(
                    DAMAGE,
                    f"{scan.error}; {scan.truncated_bytes} bytes from position "
                    f"{scan.error_position} on are invalid",
                    partition=name, file=log, offset=scan.error_offset,
                    position=scan.error_position,
                )
                damaged_at = (log, scan.error_position)
            else:
                self._check_indexes(name, log, base, scan, i == len(segments) - 1)
            self._check_records(name, log, scan.valid_bytes)
            if scan.last_offset is not None:
                prev_last = scan.last_offset
                leo = scan.last_offset + 1
            else:
                leo = base if leo is None else max(leo, base)
        if not segments:
            self.add(WARNING, "partition has no segments", partition=name, file=pdir.path)
        report.log_end_offset = leo
        report.log_start_offset = segments[0][0] if segments else None
        if target.kind != KIND_SEGMENT:
            self._check_partition_checkpoints(pdir, report, checkpoints)
        return report

    def _check_records(self, name: str, log: Path, valid_bytes: int) -> None:
        for problem in undecodable_batches(log, valid_bytes, self.max_batch_size):
            self.add(problem.severity, problem.message, partition=name, file=log,
                     offset=problem.offset, position=problem.position)

    def _check_indexes(
        self, name: str, log: Path, base: int, scan: SegmentScan, active: bool
    ) -> None:
        problem = check_offset_index(
            log, base, scan.valid_bytes, scan.last_offset, self.max_batch_size
        )
        if problem:
            self.add(problem.severity, problem.message, partition=name,
                     file=index_file(log, base, INDEX_FILE_SUFFIX), offset=problem.offset,
                     position=problem.position)
        problem = check_time_index(log, base, scan.last_offset, scan.max_timestamp)
        if problem:
            self.add(problem.severity, problem.message, partition=name,
                     file=index_file(log, base, TIME_INDEX_FILE_SUFFIX), offset=problem.offset,
                     position=problem.position)
        problem = check_txn_index(log, base, scan.last_offset)
        if problem:
            self.add(problem.severity, problem.message, partition=name,
                     file=index_file(log, base, TXN_INDEX_FILE_SUFFIX), offset=problem.offset)

    def _check_partition_files(self, pdir: PartitionDir) -> None:
        logs = {b for b, _ in list_segments(pdir.path)}
        for entry in sorted(os.scandir(pdir.path), key=lambda e: e.name):
            if entry.name.endswith(LEFTOVER_FILE_SUFFIXES):
                self.add(WARNING, "leftover file of an interrupted operation (Kafka finishes "
                         "or removes it at startup)", partition=pdir.name, file=entry.path)
            elif entry.name.endswith(INDEX_FILE_SUFFIXES):
                stem = entry.name.split(".", 1)[0]
                if stem.isdigit() and len(stem) == 20 and int(stem) not in logs:
                    self.add(WARNING, "index file without its .log segment (Kafka deletes it)",
                             partition=pdir.name, file=entry.path)
        if not pdir.checkpointed:
            self.add(WARNING, "partition dir is marked for deletion, a future replica or a "
                     "stray", partition=pdir.name, file=pdir.path)

    def _check_partition_checkpoints(
        self, pdir: PartitionDir, report: PartitionReport, checkpoints: _Checkpoints
    ) -> None:
        name = pdir.name
        leo = report.log_end_offset
        first_base = report.log_start_offset
        key = pdir.key
        root = self.target.log_dir
        if key is not None and root is not None and leo is not None:
            lso = (checkpoints.offsets.get(cp.LOG_START_OFFSET_CHECKPOINT) or {}).get(key)
            if lso is not None and first_base is not None and lso > first_base:
                report.log_start_offset = lso  # Kafka: max(checkpoint, first segment base)
            for file_name, offsets in checkpoints.offsets.items():
                value = (offsets or {}).get(key)
                if value is None:
                    continue
                if value > leo:
                    severity = WARNING if file_name == cp.CLEANER_OFFSET_CHECKPOINT else DAMAGE
                    self.add(
                        severity,
                        f"{file_name} says {value} for {name}, beyond the log end offset {leo}"
                        + ("" if severity == WARNING else ": data the broker had is missing"),
                        partition=name, file=root / file_name, offset=value,
                    )
                elif (
                    file_name == cp.RECOVERY_POINT_CHECKPOINT
                    and first_base is not None
                    and value < first_base
                ):
                    self.add(WARNING, f"{file_name} says {value} for {name}, below the first "
                             f"segment's base offset {first_base}", partition=name,
                             file=root / file_name, offset=value)
        self._check_leader_epochs(pdir, leo)

    def _check_leader_epochs(self, pdir: PartitionDir, leo: int | None) -> None:
        path = pdir.path / cp.LEADER_EPOCH_CHECKPOINT
        if not path.is_file():
            return
        try:
            entries = read_leader_epoch_entries(path)
        except (CheckpointError, OSError) as exc:
            self.add(DAMAGE, f"unreadable leader epoch checkpoint: {exc}", partition=pdir.name,
                     file=path)
            return
        problem = leader_epoch_problem(entries, leo)
        if problem is not None:
            self.add(DAMAGE, problem[0], partition=pdir.name, file=path, offset=problem[1])


def leader_epoch_problem(
    entries: list[tuple[int, int]], leo: int | None
) -> tuple[str, int] | None:
    """(message, offset) of the first broken rule: epochs and start offsets increase, <= LEO."""
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
        if leo is not None and start > leo:
            return (
                f"leader epoch {epoch} starts at offset {start}, beyond the log end offset {leo}",
                start,
            )
        previous = (epoch, start)
    return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def verify(
    path: Path | str | Target,
    *,
    max_batch_size: int | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> VerifyReport:
    """Check a segment, partition dir or log dir without changing anything.

    ``progress(n)`` is called with the number of log bytes just scanned.
    Raises InspectError when ``path`` is none of the three (see ``resolve_target`` for
    what ``force`` accepts).
    """
    target = _as_target(path, force)
    limit = DEFAULT_MAX_BATCH_SIZE if max_batch_size is None else max_batch_size
    return _Verifier(target, limit, progress).run()


# --------------------------------------------------------------------------- recover


class _Recoverer:
    def __init__(
        self,
        target: Target,
        dry_run: bool,
        full: bool,
        max_batch_size: int,
        progress: Progress | None,
    ) -> None:
        self.target = target
        self.dry_run = dry_run
        self.full = full
        self.max_batch_size = max_batch_size
        self.progress = progress
        self.report = RecoveryReport(str(target.path), target.kind, dry_run)

    def act(self, kind: str, message: str, **fields: Any) -> None:
        for key in ("file", "saved_as"):
            if fields.get(key) is not None:
                fields[key] = str(fields[key])
        self.report.actions.append(Action(kind, message, **fields))

    def run(self) -> RecoveryReport:
        target = self.target
        with _held_lock(_lock_owner_dir(target)):
            checkpoints = _read_checkpoints(
                target.log_dir if target.kind != KIND_SEGMENT else None
            )
            recovery_points = checkpoints.offsets.get(cp.RECOVERY_POINT_CHECKPOINT) or {}
            leos: dict[tuple[str, int], int] = {}
            for pdir in target.partitions:
                key = pdir.key
                if target.kind == KIND_SEGMENT or key is None:
                    start = 0
                else:
                    start = recovery_points.get(key, 0)
                leo = self._partition(pdir, start)
                self.report.partitions.append(PartitionRecovery(pdir.name, start, leo))
                if key is not None and leo is not None:
                    leos[key] = leo
            if target.kind != KIND_SEGMENT and target.log_dir is not None:
                self._correct_checkpoints(target.log_dir, checkpoints, leos)
        return self.report

    # -- segments ------------------------------------------------------------------------

    def _scan(self, log: Path, expected_min_offset: int | None) -> SegmentScan:
        from klog.storage.scan import scan_segment

        return scan_segment(
            log,
            max_batch_size=self.max_batch_size,
            verify_crc=True,
            expected_min_offset=expected_min_offset,
            progress=self.progress,
        )

    def _partition(self, pdir: PartitionDir, recovery_point: int) -> int | None:
        name = pdir.name
        if self.target.segment is not None:
            m = LOG_FILE_NAME_RE.match(self.target.segment.name)
            segments = [(int(m.group(1)) if m else 0, self.target.segment)]
        else:
            segments = list_segments(pdir.path)
        start = 0 if self.full else recovery_point
        prev_last: int | None = None
        damaged = False
        leo: int | None = None
        for i, (base, log) in enumerate(segments):
            next_base = segments[i + 1][0] if i + 1 < len(segments) else None
            if damaged or (prev_last is not None and base <= prev_last):
                # Overlapping offsets make this segment and all after it unusable.
                damaged = True
                self._orphan(name, log)
                if self.progress:
                    self.progress(_size(log))
                continue
            # Like Kafka: the segment holding the recovery point and all after it are
            # scanned; earlier ones were flushed and are trusted (their indexes are checked).
            if next_base is not None and next_base <= start:
                self._check_trusted_segment(name, log, base, next_base)
                prev_last = next_base - 1
                leo = next_base
                continue
            scan = self._scan(log, base)
            # Judged against the valid bytes only: after a truncation an index is
            # damaged when it names the cut bytes, not merely because the log changed.
            problems = _index_problems(
                log, base, scan.valid_bytes, scan.last_offset, scan.max_timestamp,
                self.max_batch_size,
            )
            if scan.error is not None:
                self._truncate(name, log, scan)
                damaged = True
                self._rebuild(name, log, base, scan.valid_bytes, "segment was truncated",
                              problems)
            elif problems:
                self._rebuild(name, log, base, scan.valid_bytes, problems[0][1].message,
                              problems)
            self._check_txn_index(name, log, base, scan.last_offset)
            if scan.last_offset is not None:
                prev_last = scan.last_offset
                leo = scan.last_offset + 1
            else:
                leo = base if leo is None else max(leo, base)
        if self.target.kind != KIND_SEGMENT and leo is not None:
            self._fix_leader_epochs(pdir, leo)
        return leo

    def _check_trusted_segment(self, name: str, log: Path, base: int, next_base: int) -> None:
        size = _size(log)
        problems = _index_problems(log, base, size, next_base - 1, None, self.max_batch_size)
        if problems:
            self._rebuild(name, log, base, None, problems[0][1].message, problems)
        elif self.progress:
            self.progress(size)
        self._check_txn_index(name, log, base, next_base - 1)

    def _check_txn_index(self, name: str, log: Path, base: int, last_offset: int | None) -> None:
        # Not rebuilt here (scan.rebuild_indexes does not write one, and a broker
        # rebuilds it from the log): a damaged one is left as it is and said, exit 1.
        problem = check_txn_index(log, base, last_offset)
        if problem is not None:
            self.report.unresolved.append(
                Finding(problem.severity, f"transaction index left as it is: {problem.message}",
                        name, str(index_file(log, base, TXN_INDEX_FILE_SUFFIX)), problem.offset)
            )

    def _truncate(self, name: str, log: Path, scan: SegmentScan) -> None:
        position = scan.valid_bytes
        removed = scan.file_size - position
        saved = _truncated_name(log, position)
        if not self.dry_run:
            _save_tail(log, position, saved)
        self.act(
            "truncate",
            f"truncated {removed} bytes at position {position} of {log.name} "
            f"({scan.error}), saved to {saved.name}",
            partition=name, file=log, position=position, bytes=removed, saved_as=saved,
        )

    def _orphan(self, name: str, log: Path) -> None:
        moved: list[str] = []
        size = _size(log)
        saved = _aside_name(log, ".orphaned")
        companions = [log.with_suffix(s) for s in INDEX_FILE_SUFFIXES]
        if not self.dry_run:
            os.rename(log, saved)
            for extra in companions:
                if extra.exists():
                    os.rename(extra, _aside_name(extra, ".orphaned"))
                    moved.append(extra.name)
            cp.fsync_dir(log.parent)
        else:
            moved = [c.name for c in companions if c.exists()]
        also = f" (with {', '.join(moved)})" if moved else ""
        self.act(
            "orphan",
            f"moved segment {log.name}{also} aside to {saved.name}: it follows damaged data "
            "(a broker would delete it)",
            partition=name, file=log, bytes=size, saved_as=saved,
        )

    def _rebuild(
        self,
        name: str,
        log: Path,
        base: int,
        valid_bytes: int | None,
        why: str,
        problems: list[tuple[Path, _Problem]],
    ) -> None:
        from klog.storage.scan import rebuild_indexes

        # A damaged index may hold what nothing else does (entries for bytes now cut, or
        # bytes we cannot read): it is kept aside, never overwritten. A missing one, or
        # one whose only fault is a preallocated zero tail, holds nothing the log does
        # not say and is rewritten in place, as a broker does.
        for path, problem in problems:
            if problem.severity != DAMAGE or not path.is_file():
                continue
            saved = _aside_name(path, ".before-recover")
            if not self.dry_run:
                os.rename(path, saved)
                cp.fsync_dir(path.parent)
            self.act(
                "save-index",
                f"moved damaged {path.name} aside to {saved.name} ({problem.message})",
                partition=name, file=path, saved_as=saved,
            )
        if not self.dry_run:
            rebuild_indexes(log, base, valid_bytes=valid_bytes)
        self.act(
            "rebuild-index",
            f"rebuilt {index_file(log, base, INDEX_FILE_SUFFIX).name} and "
            f"{index_file(log, base, TIME_INDEX_FILE_SUFFIX).name} ({why})",
            partition=name, file=log,
        )

    # -- checkpoints ---------------------------------------------------------------------

    def _rewrite(self, path: Path, write: Callable[[], None]) -> Path | None:
        """Copy ``path`` aside, then write it anew; returns the backup's name."""
        backup = _aside_name(path, ".before-recover") if path.exists() else None
        if not self.dry_run:
            if backup is not None:
                _copy_file(path, backup)
            write()
        return backup

    def _fix_leader_epochs(self, pdir: PartitionDir, leo: int) -> None:
        path = pdir.path / cp.LEADER_EPOCH_CHECKPOINT
        if not path.is_file():
            return
        try:
            entries = read_leader_epoch_entries(path)
        except (CheckpointError, OSError) as exc:
            self.report.unresolved.append(
                Finding(DAMAGE, f"unreadable leader epoch checkpoint left as it is: {exc}",
                        pdir.name, str(path))
            )
            return
        kept = [(e, s) for e, s in entries if s <= leo]
        if len(kept) == len(entries):
            problem = leader_epoch_problem(entries, leo)
            if problem is not None:
                self.report.unresolved.append(
                    Finding(DAMAGE, problem[0], pdir.name, str(path), problem[1])
                )
            return
        backup = self._rewrite(
            path,
            lambda: write_leader_epoch_entries(path, kept),
        )
        self.act(
            "correct-checkpoint",
            f"removed {len(entries) - len(kept)} leader epoch entries beyond the log end "
            f"offset {leo} from {path.name} (as a broker does at startup)",
            partition=pdir.name, file=path, saved_as=backup,
        )

    def _correct_checkpoints(
        self, root: Path, checkpoints: _Checkpoints, leos: dict[tuple[str, int], int]
    ) -> None:
        for name in cp.OFFSET_CHECKPOINT_FILES:
            path = root / name
            if name in checkpoints.errors:
                self._replace_malformed(path, name, leos, checkpoints.errors[name])
                continue
            offsets = checkpoints.offsets.get(name)
            if not offsets:
                continue
            corrected = dict(offsets)
            changes = []
            for key, value in offsets.items():
                leo = leos.get(key)
                if leo is not None and value > leo:
                    corrected[key] = leo
                    changes.append(f"{key[0]}-{key[1]} {value} -> {leo}")
            if not changes:
                continue
            backup = self._rewrite(
                path, functools.partial(cp.write_offset_checkpoint, path, corrected)
            )
            self.act(
                "correct-checkpoint",
                f"{name}: lowered to the log end offset: {', '.join(changes)}",
                file=path, saved_as=backup,
            )

    def _replace_malformed(
        self, path: Path, name: str, leos: dict[tuple[str, int], int], error: Exception
    ) -> None:
        if self.target.kind != KIND_LOG_DIR:
            # Only a whole log dir tells us every partition's log end offset.
            self.report.unresolved.append(
                Finding(DAMAGE, f"unreadable checkpoint left as it is (recover the whole log "
                        f"dir to replace it): {error}", file=str(path))
            )
            return
        # Rebuilt from the data where it can be: every partition was just scanned up to
        # its LEO, so that is its recovery point; the others start empty, which Kafka reads
        # as "unknown" (log start = first segment, high watermark from the leader).
        fresh = dict(leos) if name == cp.RECOVERY_POINT_CHECKPOINT else {}
        saved = _aside_name(path, ".malformed")
        if not self.dry_run:
            os.rename(path, saved)
            cp.write_offset_checkpoint(path, fresh)
        self.act(
            "replace-checkpoint",
            f"{name} was unreadable ({error}); moved aside to {saved.name} and wrote "
            f"{len(fresh)} entries derived from the data",
            file=path, saved_as=saved,
        )


def _save_tail(log: Path, position: int, saved: Path) -> None:
    """Copy ``log[position:]`` to ``saved`` (fsynced), then truncate ``log`` at ``position``."""
    chunk = 1 << 20
    with open(log, "r+b") as src, open(saved, "xb") as dst:
        src.seek(position)
        while True:
            data = src.read(chunk)
            if not data:
                break
            dst.write(data)
        dst.flush()
        os.fsync(dst.fileno())
        # Only once the bytes are safely elsewhere do we cut them off.
        src.truncate(position)
        src.flush()
        os.fsync(src.fileno())
    cp.fsync_dir(log.parent)


def _copy_file(src: Path, dst: Path) -> None:
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        while data := fin.read(1 << 20):
            fout.write(data)
        fout.flush()
        os.fsync(fout.fileno())


def recover(
    path: Path | str | Target,
    *,
    dry_run: bool = False,
    full: bool = False,
    max_batch_size: int | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> RecoveryReport:
    """Run a broker's startup recovery on a segment, partition dir or log dir, losslessly.

    Scans each partition from its recovery point (``full``: from the start), truncates a
    segment where invalid bytes start after saving them beside it, moves later segments
    aside, rebuilds indexes that are missing or disagree with the log, and lowers
    checkpoints beyond the data. ``dry_run`` changes nothing and reports what would be
    done. Raises InspectError for a path that is none of the three (``force``: see
    ``resolve_target``; a forced file is truncated and indexed like a segment),
    LogDirLockedError when a broker holds the log dir.
    """
    target = _as_target(path, force)
    limit = DEFAULT_MAX_BATCH_SIZE if max_batch_size is None else max_batch_size
    return _Recoverer(target, dry_run, full, limit, progress).run()
