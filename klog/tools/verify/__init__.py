"""Offline checks and repairs of Kafka log dirs: the logic behind ``klog verify`` / ``recover``.

A thin layer over storage's own checks (klog/storage/audit.py, which owns the judgement:
what is damage, what is merely rebuildable, the log dir's lock), one concern per module:

- targets.py: what a path is (a segment, a partition dir, a log dir), refused otherwise;
- reports.py: the report values and their JSON;
- verifier.py: ``verify``, the audit of every segment and checkpoint of a target;
- recoverer.py: ``recover``, a broker's startup recovery that never destroys data.

Severities (``damage``, ``rebuildable``, ``warning``) are the audit's: ``verify`` exits 1
on damage.
"""

from __future__ import annotations

from klog.storage.audit import DAMAGE, REBUILDABLE, WARNING, Finding, LogDirLockedError
from klog.tools.verify.recoverer import (
    read_leader_epoch_entries,
    recover,
    write_leader_epoch_entries,
)
from klog.tools.verify.reports import (
    STATUS_DAMAGED,
    STATUS_OK,
    STATUS_REBUILDABLE,
    Action,
    PartitionRecovery,
    PartitionReport,
    RecoveryReport,
    SegmentReport,
    VerifyReport,
)
from klog.tools.verify.targets import (
    KIND_LOG_DIR,
    KIND_PARTITION,
    KIND_SEGMENT,
    InspectError,
    PartitionDir,
    Target,
    held_lock,
    log_dir_is_locked,
    resolve_target,
)
from klog.tools.verify.verifier import verify

__all__ = [
    "DAMAGE",
    "KIND_LOG_DIR",
    "KIND_PARTITION",
    "KIND_SEGMENT",
    "REBUILDABLE",
    "STATUS_DAMAGED",
    "STATUS_OK",
    "STATUS_REBUILDABLE",
    "WARNING",
    "Action",
    "Finding",
    "InspectError",
    "LogDirLockedError",
    "PartitionDir",
    "PartitionRecovery",
    "PartitionReport",
    "RecoveryReport",
    "SegmentReport",
    "Target",
    "VerifyReport",
    "held_lock",
    "log_dir_is_locked",
    "read_leader_epoch_entries",
    "recover",
    "resolve_target",
    "verify",
    "write_leader_epoch_entries",
]
