"""``klog recover``: a broker's startup recovery, as a tool, that never destroys data.

Scans each partition from its recovery point (``full``: from the start), truncates a
segment where invalid bytes start, moves later segments aside, rebuilds indexes that are
missing or disagree with the log, and lowers checkpoints beyond the data. What is damage
is storage's judgement (klog/storage/audit.py); the scan and the rebuild are storage's too
(``scan.scan_segment`` through the audit, ``scan.rebuild_indexes``).

Unlike a broker it never destroys data: invalid bytes cut from a segment are saved beside
it (``<segment>.log.truncated-at-<position>.bin``), segments after a damaged one are moved
aside (``<segment>.log.orphaned``) instead of deleted, a checkpoint file is copied aside
(``<name>.before-recover``) before it is rewritten, and an index found damaged is moved
aside (``<segment>.index.before-recover``) before a new one is built. Only an index that
is missing or whose sole fault is a preallocated zero-filled tail is rewritten in place:
the rebuilt file says everything it said. Saved files are never overwritten: a counter is
added. Running it twice changes nothing the second time.

A batch whose CRC holds but whose records do not decode is kept, as Kafka's recovery keeps
it (LogSegment.recover checks sizes and CRCs, never records). To let consumers past it,
delete the records up to its last offset (DeleteRecords).

Not thread-safe and not meant to run beside a broker: it holds the log dir's ``.lock``
(audit.py's lock, the one a broker takes) for its whole run and refuses to start if a
broker holds it.

``Any`` below: ``**fields`` are an Action's keyword fields.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from klog.protocol.records.batch import DEFAULT_MAX_BATCH_SIZE
from klog.storage import audit, leader_epoch
from klog.storage import checkpoints as cp
from klog.storage.audit import DAMAGE, Finding, LogDirCheckpoints, Progress
from klog.storage.checkpoints import CheckpointError
from klog.storage.files import INDEX_FILE_SUFFIXES, offset_index_file_path, time_index_file_path
from klog.storage.scan import SegmentScan, rebuild_indexes
from klog.tools.verify.reports import Action, PartitionRecovery, RecoveryReport
from klog.tools.verify.targets import (
    KIND_LOG_DIR,
    KIND_SEGMENT,
    PartitionDir,
    Target,
    as_target,
    target_segments,
)


def read_leader_epoch_entries(path: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a ``leader-epoch-checkpoint`` (read-only);
    CheckpointError for a malformed file."""
    return audit.read_leader_epochs(path)


def write_leader_epoch_entries(path: Path, entries: list[tuple[int, int]]) -> None:
    """Write a ``leader-epoch-checkpoint`` atomically (leader_epoch.py owns the file)."""
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
        with audit.log_dir_lock_held(target.lock_owner):
            checkpoints = audit.read_log_dir_checkpoints(
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

    def _partition(self, pdir: PartitionDir, recovery_point: int) -> int | None:
        name = pdir.name
        segments, _unnamed = target_segments(self.target, pdir)
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
                    self.progress(audit.file_size(log))
                continue
            # Like Kafka: the segment holding the recovery point and all after it are
            # scanned; earlier ones were flushed and are trusted (their indexes are checked).
            if next_base is not None and next_base <= start:
                self._check_trusted_segment(name, log, base, next_base)
                prev_last = next_base - 1
                leo = next_base
                continue
            seen = audit.audit_segment(log, base, max_batch_size=self.max_batch_size,
                                       progress=self.progress, partition=name,
                                       check_records=False)
            scan = seen.scan
            # Judged against the valid bytes only: after a truncation an index is
            # damaged when it names the cut bytes, not merely because the log changed.
            problems = audit.audit_indexes(
                log, base, scan.valid_bytes, scan.last_offset, scan.max_timestamp,
                max_batch_size=self.max_batch_size, batch_ends=seen.batch_ends,
                partition=name,
            )
            if scan.error is not None:
                self._truncate(name, log, scan)
                damaged = True
                self._rebuild(name, log, base, scan.valid_bytes, "segment was truncated",
                              problems)
            elif problems:
                self._rebuild(name, log, base, scan.valid_bytes, problems[0].message, problems)
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
        size = audit.file_size(log)
        problems = audit.audit_indexes(log, base, size, next_base - 1, None,
                                       max_batch_size=self.max_batch_size, partition=name)
        if problems:
            self._rebuild(name, log, base, None, problems[0].message, problems)
        elif self.progress:
            self.progress(size)
        self._check_txn_index(name, log, base, next_base - 1)

    def _check_txn_index(self, name: str, log: Path, base: int, last_offset: int | None) -> None:
        # Not rebuilt here (scan.rebuild_indexes does not write one, and a broker
        # rebuilds it from the log): a damaged one is left as it is and said, exit 1.
        problem = audit.audit_txn_index(log, base, last_offset, partition=name)
        if problem is not None:
            self.report.unresolved.append(
                Finding(problem.severity, f"transaction index left as it is: {problem.message}",
                        name, problem.file, problem.offset)
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
        size = audit.file_size(log)
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
        problems: list[Finding],
    ) -> None:
        # A damaged index may hold what nothing else does (entries for bytes now cut, or
        # bytes we cannot read): it is kept aside, never overwritten. A missing one, or
        # one whose only fault is a preallocated zero tail, holds nothing the log does
        # not say and is rewritten in place, as a broker does.
        for problem in problems:
            path = Path(problem.file or "")
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
            f"rebuilt {offset_index_file_path(log.parent, base).name} and "
            f"{time_index_file_path(log.parent, base).name} ({why})",
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
            problem = audit.leader_epoch_problem(entries, leo)
            if problem is not None:
                self.report.unresolved.append(
                    Finding(DAMAGE, problem[0], pdir.name, str(path), problem[1])
                )
            return
        backup = self._rewrite(path, lambda: write_leader_epoch_entries(path, kept))
        self.act(
            "correct-checkpoint",
            f"removed {len(entries) - len(kept)} leader epoch entries beyond the log end "
            f"offset {leo} from {path.name} (as a broker does at startup)",
            partition=pdir.name, file=path, saved_as=backup,
        )

    def _correct_checkpoints(
        self, root: Path, checkpoints: LogDirCheckpoints, leos: Mapping[tuple[str, int], int]
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
        self, path: Path, name: str, leos: Mapping[tuple[str, int], int], error: Exception
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

    ``dry_run`` changes nothing and reports what would be done. Raises InspectError for a
    path that is none of the three (``force``: see ``resolve_target``; a forced file is
    truncated and indexed like a segment), LogDirLockedError when a broker holds the log
    dir.
    """
    target = as_target(path, force)
    limit = DEFAULT_MAX_BATCH_SIZE if max_batch_size is None else max_batch_size
    return _Recoverer(target, dry_run, full, limit, progress).run()
