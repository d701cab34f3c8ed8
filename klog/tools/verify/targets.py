"""What a path given to ``klog verify`` / ``klog recover`` is, and the lock of its log dir.

One of three targets, detected from the path:

- a segment file (``00000000000000000000.log``: a 20-digit base offset, in a partition dir;
  its indexes are looked for beside it),
- a partition dir (``<topic>-<partition>``, storage/files.py's PARTITION_DIR_NAME_RE;
  broker checkpoints are read from its parent when the parent is a log dir),
- a log dir (meta.properties or the broker-level checkpoint files, or partition dirs that
  hold segments).

Anything else is refused (InspectError) unless the caller forces it: ``recover`` truncates
and rewrites what it takes for a segment, so an application's ``app.log`` or a directory
that merely holds a ``.log`` must never be taken for one by accident.

The lock is storage's (audit.py: the ``.lock`` a broker, Kafka's or klog's, holds).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from klog.storage import audit
from klog.storage import checkpoints as cp
from klog.storage.audit import file_size, list_segments, log_dir_lock_held
from klog.storage.files import (
    LOG_FILE_NAME_RE,
    LOG_FILE_SUFFIX,
    PARTITION_DIR_NAME_RE,
    SEGMENT_COMPANION_FILE_NAME_RE,
)

KIND_SEGMENT = "segment"
KIND_PARTITION = "partition"
KIND_LOG_DIR = "log_dir"


class InspectError(Exception):
    """The path is not something verify/recover works on (a usage error, exit 2)."""


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
        return sum(file_size(log) for log in self.log_files())

    @property
    def lock_owner(self) -> Path:
        """The log dir whose ``.lock`` a broker on this target holds: a partition's log
        dir is its parent (with or without checkpoint files yet)."""
        if self.kind == KIND_LOG_DIR:
            return self.path
        return self.partitions[0].path.parent


def _partition_dir(path: Path) -> PartitionDir:
    m = PARTITION_DIR_NAME_RE.match(path.name)
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
    subdirs = [
        Path(e.path) for e in children if e.is_dir() and PARTITION_DIR_NAME_RE.match(e.name)
    ]
    has_segments = any(LOG_FILE_NAME_RE.match(e.name) for e in children if e.is_file())
    if _is_log_dir(path) or (
        # Without broker files, partition dirs make a log dir only when they hold
        # segments: a dir with some "<name>-<digits>" subdir (python-3) is not one.
        not has_segments
        and (bool(subdirs) if force else any(_has_segments(d) for d in subdirs))
    ):
        parts = tuple(_partition_dir(p) for p in subdirs)
        return Target(path, KIND_LOG_DIR, parts, path)
    if PARTITION_DIR_NAME_RE.match(path.name) or (force and has_segments):
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


def as_target(path: Path | str | Target, force: bool = False) -> Target:
    return path if isinstance(path, Target) else resolve_target(path, force=force)


def target_segments(target: Target, pdir: PartitionDir) -> tuple[list[tuple[int, Path]], bool]:
    """(base offset, path) of the segments to look at in ``pdir``, and whether the one
    given by name has a name that is not a base offset (then taken as 0)."""
    if target.segment is None:
        return list_segments(pdir.path), False
    m = LOG_FILE_NAME_RE.match(target.segment.name)
    return [(int(m.group(1)) if m else 0, target.segment)], m is None


def held_lock(log_dir: Path | None) -> contextlib.AbstractContextManager[None]:
    """Hold ``log_dir``'s ``.lock`` as a broker would for a block, or raise
    LogDirLockedError: the check every offline tool that writes makes (recover, compact)."""
    return log_dir_lock_held(log_dir)


def log_dir_is_locked(path: Path | str | Target) -> bool:
    """True when a broker holds the ``.lock`` of the log dir that ``path`` belongs to."""
    return audit.log_dir_is_locked(as_target(path).lock_owner)
