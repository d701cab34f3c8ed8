"""The chaos harness's checker: histories and the final logs in, anomalies and counts out.

Pure functions (no I/O), run after the nemesis healed and the cluster is quiet, on:

- the producers' ``Op`` histories and each partition's final log, read from the start to
  the high watermark (``{partition: [(offset, value), ...]}``): every acknowledged record
  present exactly once ("lost", "duplicated"), at the offset acknowledged
  ("offset_mismatch"), in the order acknowledged per producer and partition
  ("reordered"); no record at all duplicated; and what a live reader saw earlier is in the
  log at the same offset ("phantom_reads": a record read, then gone: a read above the real
  high watermark);
- the transactions and the read_committed final log: no record of an aborted transaction
  visible ("aborted_visible"), every committed transaction whole ("committed_lost"), no
  transaction partly visible ("partial"), and nothing a live read_committed reader saw
  that was not committed in the end ("dirty_reads");
- the consumer group: the committed offsets the monitor read never go backwards, and the
  final ones are at least every commit that succeeded ("backwards");
- the replicas (``compare_replicas``): each partition's batches identical on every
  replica up to the high watermark.

Availability: for each nemesis event, the longest time without an acknowledgement
(across all producers) overlapping the event.

Loss under acks=1 or unclean leader election is what Kafka documents: those runs report
it (``informational``) without failing.
"""

from __future__ import annotations

import itertools
import struct
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.workloads import Commit, Op, Txn

QUIET = "none"

FinalLog = Mapping[int, Sequence[tuple[int, str]]]


@dataclass
class Event:
    kind: str
    targets: list[str]
    start: float
    heal: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def covers(self, t: float) -> bool:
        return self.start <= t < (self.heal if self.heal is not None else float("inf"))


def kind_at(events: Sequence[Event], t: float) -> str:
    for e in events:
        if e.covers(t):
            return e.kind
    return QUIET


@dataclass
class ProducerCounts:
    operations: int = 0
    acked: int = 0
    failed: int = 0
    unknown: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    offset_mismatch: int = 0
    unacked_present: int = 0
    #: acknowledged without an offset (librdkafka's report of a DUPLICATE_SEQUENCE_NUMBER
    #: answer: persisted, offset unknown); only their presence can be checked
    acked_offset_unknown: int = 0

    def add(self, other: ProducerCounts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def check_producers(ops: Sequence[Op], final: FinalLog, events: Sequence[Event]
                    ) -> tuple[ProducerCounts, dict[str, ProducerCounts], list[str]]:
    """Counts over all ops, counts per nemesis kind (by send time), and one line per
    anomaly (the first few of each sort are enough to start from)."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)  # value -> [(p, offset)]
    for partition, records in final.items():
        for offset, value in records:
            where[value].append((partition, offset))
    total = ProducerCounts()
    per_kind: dict[str, ProducerCounts] = defaultdict(ProducerCounts)
    notes: list[str] = []
    # (producer, partition) -> [(seq, offset)] of acknowledged records found
    order: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    kind_of_op: dict[tuple[int, int], str] = {}
    for op in ops:
        c = ProducerCounts(operations=1)
        kind = kind_at(events, op.sent)
        kind_of_op[(op.producer, op.seq)] = kind
        found = where.get(op.value, [])
        if len(found) > 1:
            c.duplicated = 1
            notes.append(f"duplicated: {op.value} at {found}")
        if op.status == "ok":
            c.acked = 1
            if not found:
                c.lost = 1
                notes.append(f"lost: {op.value} acknowledged at {op.partition}:{op.offset} "
                             f"(sent {op.sent:.2f} s, acked {op.acked} s, during {kind})")
            else:
                if op.offset is None or op.offset < 0:
                    c.acked_offset_unknown = 1
                elif (op.partition, op.offset) not in found:
                    c.offset_mismatch = 1
                    notes.append(f"offset mismatch: {op.value} acknowledged at "
                                 f"{op.partition}:{op.offset}, found at {found}")
                order[(op.producer, op.partition)].append((op.seq, found[0][1]))
        elif op.status == "fail":
            c.failed = 1
        else:
            c.unknown = 1
        if op.status != "ok" and found:
            c.unacked_present = 1
        total.add(c)
        per_kind[kind].add(c)
    for (producer, _partition), pairs in order.items():
        pairs.sort()
        highest = -1
        for seq, offset in pairs:
            if offset < highest:
                kind = kind_of_op[(producer, seq)]
                total.reordered += 1
                per_kind[kind].reordered += 1
                notes.append(f"reordered: producer {producer} record {seq} at offset {offset} "
                             f"after a lower-numbered record at {highest}")
            highest = max(highest, offset)
    # A value in the log that no op sent would be a corruption: no producer wrote it.
    sent = {op.value for op in ops}
    strangers = [v for v in where if v not in sent]
    if strangers:
        notes.append(f"{len(strangers)} records in the log that no producer sent, e.g. "
                     f"{strangers[:3]}")
    return total, dict(per_kind), notes


def check_live_reads(seen: Iterable[tuple[int, int, str, float]], final: FinalLog
                     ) -> tuple[int, list[str]]:
    """Records a live reader saw that are not at that offset in the final log."""
    at = {(p, o): v for p, records in final.items() for o, v in records}
    phantoms = 0
    notes = []
    for partition, offset, value, t in seen:
        if at.get((partition, offset)) != value:
            phantoms += 1
            if phantoms <= 20:
                notes.append(f"phantom read: {value} read at {partition}:{offset} at {t:.2f} s, "
                             f"the log has {at.get((partition, offset))!r} there")
    return phantoms, notes


@dataclass
class TxnCounts:
    transactions: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    aborted_visible: int = 0
    committed_lost: int = 0
    partial: int = 0
    duplicated: int = 0
    dirty_reads: int = 0
    unknown_visible: int = 0


def check_transactions(txns: Sequence[Txn], final_committed: FinalLog,
                       live: Iterable[tuple[int, int, str, float]]
                       ) -> tuple[TxnCounts, list[str]]:
    visible = Counter(v for records in final_committed.values() for _o, v in records)
    c = TxnCounts(transactions=len(txns))
    notes: list[str] = []
    outcome_of: dict[str, str] = {}
    for txn in txns:
        if txn.outcome == "committed":
            c.committed += 1
        elif txn.outcome == "aborted":
            c.aborted += 1
        else:
            c.unknown += 1
        values = [v for _p, v in txn.records]
        shown = [v for v in values if visible[v]]
        for v in values:
            outcome_of[v] = txn.outcome
        label = f"transaction {txn.producer}/{txn.txn} ({txn.outcome}, {len(values)} records)"
        if txn.outcome == "aborted" and shown:
            c.aborted_visible += 1
            notes.append(f"aborted but visible: {label}: {shown}")
        if txn.outcome == "committed" and len(shown) < len(values):
            c.committed_lost += 1
            notes.append(f"committed but not visible: {label}: missing "
                         f"{sorted(set(values) - set(shown))}")
        if shown and len(shown) < len(values) and txn.outcome != "committed":
            c.partial += 1
            notes.append(f"partly visible: {label}: {shown} of {values}")
        if txn.outcome == "unknown" and shown:
            c.unknown_visible += 1
    for v, n in visible.items():
        if n > 1:
            c.duplicated += 1
            notes.append(f"duplicated under read_committed: {v} x{n}")
    at = {(p, o): v for p, records in final_committed.items() for o, v in records}
    for partition, offset, value, t in live:
        outcome = outcome_of.get(value)
        if outcome == "aborted" or at.get((partition, offset)) != value:
            c.dirty_reads += 1
            if c.dirty_reads <= 20:
                notes.append(f"read_committed read {value} at {partition}:{offset} at {t:.2f} s "
                             f"({outcome}); the log has {at.get((partition, offset))!r} there")
    return c, notes


@dataclass
class GroupCounts:
    commits: int = 0
    observations: int = 0
    joins: int = 0
    leaves: int = 0
    backwards: int = 0


def check_group(commits: Sequence[Commit], observed: Sequence[tuple[float, int, int]],
                final: Mapping[int, int]) -> tuple[GroupCounts, list[str]]:
    c = GroupCounts(commits=len(commits), observations=len(observed))
    notes: list[str] = []
    last: dict[int, tuple[float, int]] = {}
    for t, partition, offset in sorted(observed):
        prev = last.get(partition)
        if prev is not None and offset < prev[1]:
            c.backwards += 1
            notes.append(f"committed offset of partition {partition} went back from {prev[1]} "
                         f"(read at {prev[0]:.2f} s) to {offset} (read at {t:.2f} s)")
        last[partition] = (t, offset)
    highest: dict[int, Commit] = {}
    for commit in commits:
        if commit.partition not in highest or commit.offset > highest[commit.partition].offset:
            highest[commit.partition] = commit
    for partition, commit in highest.items():
        end = final.get(partition, -1)
        if end < commit.offset:
            c.backwards += 1
            notes.append(f"partition {partition}: a commit of {commit.offset} succeeded at "
                         f"{commit.time:.2f} s, but the group's committed offset is {end}")
    return c, notes


def unavailability(events: Sequence[Event], ack_times: Sequence[float], end: float
                   ) -> list[float]:
    """For each event, the longest time without any acknowledgement that overlaps it: the
    gaps between consecutive acknowledgements (and from the last one to ``end``) that
    reach into [start, heal]."""
    points = [*sorted(ack_times), end]
    out = []
    for e in events:
        heal = e.heal if e.heal is not None else end
        longest = 0.0
        for before, after in itertools.pairwise(points):
            if after >= e.start and before <= heal:
                longest = max(longest, after - before)
        out.append(round(longest, 2))
    return out


def acknowledged_after(times: Iterable[float], moment: float) -> int:
    """How many acknowledgements came at or after ``moment`` (liveness after healing)."""
    return sum(1 for t in times if t >= moment)


# -- replicas ------------------------------------------------------------------------------

_BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength


def segment_batches(partition_dir: Path, end_offset: int) -> list[tuple[int, bytes]]:
    """The (base offset, bytes) of every batch that starts below ``end_offset``, over the
    partition's segments in order. A v2 batch's last offset delta is at byte 23."""
    out = []
    for path in sorted(partition_dir.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            base, length = _BATCH_HEAD.unpack_from(data, pos)
            if length <= 0 or pos + 12 + length > len(data):
                break
            if base >= end_offset:
                return out
            out.append((base, data[pos:pos + 12 + length]))
            pos += 12 + length
    return out


def last_offset(batch: bytes) -> int:
    base = struct.unpack_from(">q", batch)[0]
    return int(base + struct.unpack_from(">i", batch, 23)[0])


def compare_replicas(dirs: Mapping[int, Path], high_watermark: int) -> list[str]:
    """Differences between the replicas' batches below the high watermark."""
    batches = {b: segment_batches(d, high_watermark) for b, d in dirs.items()}
    notes = []
    reference_id = min(batches)
    reference = batches[reference_id]
    for broker, mine in batches.items():
        reach = last_offset(mine[-1][1]) + 1 if mine else 0
        if high_watermark > 0 and reach < high_watermark:
            notes.append(f"broker {broker} has offsets up to {reach}, below the high "
                         f"watermark {high_watermark}")
        if broker == reference_id:
            continue
        for (b1, x), (b2, y) in zip(reference, mine, strict=False):
            if b1 != b2 or x != y:
                notes.append(f"brokers {reference_id} and {broker} differ at the batch of "
                             f"offset {min(b1, b2)}")
                break
    return notes


def table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """The per-nemesis table, plain text."""
    columns = ["operations", "acked", "lost", "duplicated", "reordered", "max_unavailability_s"]
    head = f"{'nemesis':<22}" + "".join(f"{c.replace('_s', ' s'):>22}" for c in columns)
    lines = [head, "-" * len(head)]
    for kind, row in rows.items():
        lines.append(f"{kind:<22}" + "".join(f"{row.get(c, 0)!s:>22}" for c in columns))
    return "\n".join(lines)
