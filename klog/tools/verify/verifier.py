"""``klog verify``: storage's audit of a segment, partition dir or log dir, as one report.

The checks and their severities are storage's (klog/storage/audit.py); this module walks
the target's partitions and segments in order, asks the audit about each, and adds what
only a walk over a partition's segments knows: a segment whose base offset does not follow
the previous one, segments after damaged data, a partition without segments, and which
segment is the active one (the last, while a broker holds the log dir: its preallocated
indexes are the room for entries to come, not damage). It changes nothing.

Memory does not grow with segment size: each segment is read once, in bounded chunks, by
the audit's walk, which also checks its records and notes the batches its offset index
names.
"""

from __future__ import annotations

from pathlib import Path

from klog.protocol.records.batch import DEFAULT_MAX_BATCH_SIZE
from klog.storage import audit
from klog.storage.audit import DAMAGE, REBUILDABLE, WARNING, Finding, LogDirCheckpoints, Progress
from klog.tools.verify.reports import (
    STATUS_DAMAGED,
    STATUS_REBUILDABLE,
    PartitionReport,
    SegmentReport,
    VerifyReport,
)
from klog.tools.verify.targets import (
    KIND_LOG_DIR,
    KIND_SEGMENT,
    PartitionDir,
    Target,
    as_target,
    target_segments,
)


class _Verifier:
    def __init__(self, target: Target, max_batch_size: int, progress: Progress | None) -> None:
        self.target = target
        self.max_batch_size = max_batch_size
        self.progress = progress
        self.report = VerifyReport(str(target.path), target.kind)
        self.locked = False

    def add(self, *findings: Finding | None) -> None:
        self.report.findings.extend(f for f in findings if f is not None)

    def run(self) -> VerifyReport:
        target = self.target
        self._check_lock()
        checkpoints = audit.read_log_dir_checkpoints(
            target.log_dir if target.kind != KIND_SEGMENT else None
        )
        if target.kind == KIND_LOG_DIR:
            self.report.meta, found = audit.audit_log_dir_files(target.path, checkpoints)
            self.add(*found)
        for pdir in target.partitions:
            self.report.partitions.append(self._partition(pdir, checkpoints))
        if target.kind == KIND_LOG_DIR:
            present = {p.key for p in target.partitions if p.key is not None}
            self.add(*audit.audit_checkpoint_partitions(target.path, checkpoints, present))
        self._set_statuses()
        return self.report

    def _check_lock(self) -> None:
        try:
            with audit.log_dir_lock_held(self.target.lock_owner):
                pass
        except audit.LogDirLockedError as exc:
            self.locked = True
            self.add(Finding(WARNING, f"{exc}; active segments may change while being read"))

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

    def _skip(self, log: Path) -> None:
        if self.progress:
            self.progress(audit.file_size(log))

    def _partition(self, pdir: PartitionDir, checkpoints: LogDirCheckpoints) -> PartitionReport:
        target = self.target
        name = pdir.name
        report = PartitionReport(name, str(pdir.path), pdir.topic, pdir.partition)
        segments, unnamed = target_segments(target, pdir)
        if unnamed:
            self.add(Finding(WARNING, "segment file name is not a 20-digit base offset; "
                             "assuming 0", name, str(target.segment)))
        if target.segment is None:
            self.add(*audit.audit_partition_files(pdir.path, checkpointed=pdir.checkpointed,
                                                  partition=name))
        prev_last: int | None = None
        damaged_at: tuple[Path, int | None] | None = None
        leo: int | None = None
        for i, (base, log) in enumerate(segments):
            if damaged_at is not None:
                self.add(Finding(
                    DAMAGE,
                    f"segment follows damaged data ({damaged_at[0].name} at position "
                    f"{damaged_at[1]}); a broker would delete it, klog recover moves it aside",
                    name, str(log), base, 0,
                ))
                self._skip(log)
                continue
            if prev_last is not None and base <= prev_last:
                self.add(Finding(
                    DAMAGE,
                    f"segment base offset {base} is not above the previous segment's last "
                    f"offset {prev_last}",
                    name, str(log), base, 0,
                ))
                damaged_at = (log, 0)
                self._skip(log)
                continue
            seen = audit.audit_segment(log, base, max_batch_size=self.max_batch_size,
                                       progress=self.progress, partition=name)
            scan = seen.scan
            report.segments.append(
                SegmentReport(str(log), base, scan.file_size, scan.valid_bytes, scan.batches,
                              scan.records, scan.first_offset, scan.last_offset)
            )
            if seen.damage is not None:
                self.add(seen.damage)
                damaged_at = (log, scan.error_position)
            else:
                # The active segment: the last one, while a broker appends to it.
                active = self.locked and i == len(segments) - 1
                self.add(
                    *audit.audit_indexes(
                        log, base, scan.valid_bytes, scan.last_offset, scan.max_timestamp,
                        max_batch_size=self.max_batch_size, batch_ends=seen.batch_ends,
                        active=active, partition=name,
                    ),
                    audit.audit_txn_index(log, base, scan.last_offset, partition=name),
                )
            self.add(*seen.records)
            if scan.last_offset is not None:
                prev_last = scan.last_offset
                leo = scan.last_offset + 1
            else:
                leo = base if leo is None else max(leo, base)
        if not segments:
            self.add(Finding(WARNING, "partition has no segments", name, str(pdir.path)))
        report.log_end_offset = leo
        report.log_start_offset = segments[0][0] if segments else None
        if target.kind != KIND_SEGMENT:
            self._check_partition_checkpoints(pdir, report, checkpoints)
        return report

    def _check_partition_checkpoints(
        self, pdir: PartitionDir, report: PartitionReport, checkpoints: LogDirCheckpoints
    ) -> None:
        leo = report.log_end_offset
        key = pdir.key
        root = self.target.log_dir
        if key is not None and root is not None and leo is not None:
            log_start, found = audit.audit_partition_checkpoints(
                root, checkpoints, key, leo, report.log_start_offset
            )
            report.log_start_offset = log_start
            self.add(*found)
        self.add(*audit.audit_leader_epochs(pdir.path, leo, partition=pdir.name))
        self.add(*audit.audit_producer_snapshots(pdir.path, leo, partition=pdir.name))


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
    target = as_target(path, force)
    limit = DEFAULT_MAX_BATCH_SIZE if max_batch_size is None else max_batch_size
    return _Verifier(target, limit, progress).run()
