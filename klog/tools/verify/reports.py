"""What ``klog verify`` and ``klog recover`` report: findings, per-partition rows, actions.

Plain values (dataclasses with ``to_dict`` for ``--json``); the findings themselves are
storage's (``audit.Finding``), whose severities and statuses are re-exported here.

``Any`` below: the reports' ``to_dict`` give JSON documents, whose values are of every
JSON type.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from klog.storage.audit import DAMAGE, REBUILDABLE, Finding
from klog.storage.checkpoints import MetaProperties

STATUS_OK = "ok"
STATUS_DAMAGED = "damaged"
STATUS_REBUILDABLE = "rebuildable"


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
