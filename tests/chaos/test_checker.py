"""The chaos checker on histories made by hand: each anomaly it exists to find is found,
and a clean history has none. No network, no root: these run everywhere."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.chaos import checker
from tests.chaos.checker import Event
from tests.chaos.nemesis import KINDS, Schedule
from tests.chaos.workloads import Commit, Op, Txn


def _ops(n: int, partitions: int = 2) -> list[Op]:
    return [Op(0, seq, seq % partitions, f"w-0-{seq}", sent=float(seq), status="ok",
               offset=seq // partitions, acked=seq + 0.5) for seq in range(n)]


def _log(ops: list[Op]) -> dict[int, list[tuple[int, str]]]:
    out: dict[int, list[tuple[int, str]]] = {}
    for op in ops:
        out.setdefault(op.partition, []).append((op.offset, op.value))
    return out


def test_a_clean_history_has_no_anomaly() -> None:
    ops = _ops(10)
    total, per_kind, notes = checker.check_producers(ops, _log(ops), [])
    assert notes == []
    assert (total.operations, total.acked, total.lost, total.duplicated, total.reordered) == \
        (10, 10, 0, 0, 0)
    assert per_kind[checker.QUIET].acked == 10


def test_lost_duplicated_reordered_and_moved_records_are_found() -> None:
    ops = _ops(10)
    log = _log(ops)
    log[0] = [r for r in log[0] if r[1] != "w-0-4"]                 # acknowledged, gone
    log[1].append((5, "w-0-1"))                                      # written twice
    log[0] = [(o, {"w-0-6": "w-0-8", "w-0-8": "w-0-6"}.get(v, v)) for o, v in log[0]]
    events = [Event("kill", ["b1"], 3.5, 9.0)]
    total, per_kind, notes = checker.check_producers(ops, log, events)
    assert (total.lost, total.duplicated) == (1, 1)
    assert total.reordered == 1 and total.offset_mismatch == 2
    assert per_kind["kill"].lost == 1 and per_kind[checker.QUIET].duplicated == 1
    assert any(n.startswith("lost: w-0-4") for n in notes)


def test_unacknowledged_records_may_be_absent_or_present_once() -> None:
    ops = _ops(4)
    ops[3].status, ops[3].offset = "unknown", -1
    ops[2].status, ops[2].offset = "fail", -1
    log = _log(_ops(3))  # the failed one was written after all, the unknown one not
    total, _per_kind, notes = checker.check_producers(ops, log, [])
    assert notes == []
    assert (total.failed, total.unknown, total.unacked_present) == (1, 1, 1)


def test_live_reads_must_stay_in_the_log() -> None:
    ops = _ops(4)
    seen = [(0, 0, "w-0-0", 1.0), (1, 1, "w-0-9", 2.0)]  # the second was truncated away
    phantoms, notes = checker.check_live_reads(seen, _log(ops))
    assert phantoms == 1 and "w-0-9" in notes[0]


def test_transactions_aborted_visible_partial_lost_and_dirty_reads() -> None:
    txns = [Txn(0, 0, "commit", [(0, "a0"), (1, "a1")], outcome="committed"),
            Txn(0, 1, "abort", [(0, "b0")], outcome="aborted"),
            Txn(0, 2, "commit", [(0, "c0"), (1, "c1")], outcome="unknown"),
            Txn(0, 3, "commit", [(1, "d0")], outcome="committed")]
    final = {0: [(0, "a0"), (3, "b0"), (5, "c0")], 1: [(0, "a1")]}
    live = [(0, 0, "a0", 1.0), (1, 2, "x", 2.0)]
    counts, notes = checker.check_transactions(txns, final, live)
    assert (counts.aborted_visible, counts.partial, counts.committed_lost) == (1, 1, 1)
    assert counts.dirty_reads == 1 and len(notes) == 4
    clean, notes = checker.check_transactions(txns[:1], {0: [(0, "a0")], 1: [(0, "a1")]},
                                              [(0, 0, "a0", 1.0)])
    assert notes == [] and clean.committed == 1


def test_group_offsets_never_go_back() -> None:
    commits = [Commit(0, 0, 10, 1.0), Commit(1, 0, 20, 2.0)]
    observed = [(1.5, 0, 10), (2.5, 0, 20), (3.5, 0, 15)]
    counts, notes = checker.check_group(commits, observed, {0: 15})
    assert counts.backwards == 2 and len(notes) == 2
    counts, notes = checker.check_group(commits, observed[:2], {0: 20})
    assert counts.backwards == 0 and notes == []


def test_unavailability_is_the_longest_gap_overlapping_each_event() -> None:
    acks = [0.0, 1.0, 2.0, 7.0, 8.0, 8.5]
    events = [Event("pause", ["b2"], 2.5, 6.0), Event("kill", ["b1"], 8.1, 8.4)]
    assert checker.unavailability(events, acks, end=10.0) == [5.0, 0.5]
    assert checker.acknowledged_after(acks, 7.0) == 3


def _batch(base: int, count: int, payload: bytes) -> bytes:
    # baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta
    body = struct.pack(">ibIhi", 0, 2, 0, 0, count - 1) + payload
    return struct.pack(">qi", base, len(body)) + body


def test_replicas_are_compared_batch_by_batch_up_to_the_high_watermark(tmp_path: Path) -> None:
    dirs = {}
    for broker, tail in ((1, b"same"), (2, b"same"), (3, b"diff")):
        d = tmp_path / f"b{broker}" / "t-0"
        d.mkdir(parents=True)
        (d / "00000000000000000000.log").write_bytes(
            _batch(0, 2, b"x") + _batch(2, 1, tail) + _batch(3, 1, b"beyond" + tail))
        dirs[broker] = d
    assert checker.compare_replicas({1: dirs[1], 2: dirs[2]}, 3) == []
    notes = checker.compare_replicas(dirs, 3)
    assert notes == ["brokers 1 and 3 differ at the batch of offset 2"]
    assert checker.compare_replicas({1: dirs[1], 3: dirs[3]}, 2) == []  # below the HW
    short = tmp_path / "b4" / "t-0"
    short.mkdir(parents=True)
    (short / "00000000000000000000.log").write_bytes(_batch(0, 2, b"x"))
    assert "below the high watermark 3" in checker.compare_replicas({1: dirs[1], 4: short},
                                                                    3)[0]


def test_schedules_replay_from_their_seed() -> None:
    a = Schedule(42, list(KINDS)).preview(300)
    b = Schedule(42, list(KINDS)).preview(300)
    assert a == b and {s.kind for s in a} == set(KINDS)  # every kind within 300 s
    assert Schedule(43, list(KINDS)).preview(300) != a


def _judge(acks: str, lose: bool) -> dict[str, object]:
    """runner._check on workloads built (never started) with hand-made histories."""
    from tests.chaos import runner
    from tests.chaos.workloads import (
        Clock,
        GroupWorkload,
        KlogProducerWorkload,
        LiveReader,
        ProducerWorkload,
        TransactionWorkload,
    )

    clock = Clock()
    producers = {name: cls(name, clock, "x:1", name, 2) for name, cls in (
        ("idempotent", ProducerWorkload), ("klog", KlogProducerWorkload),
        ("group-feed", ProducerWorkload))}
    for w in producers.values():
        w.ops = _ops(6)
    finals = {"idempotent": _log(_ops(6)), "klog": _log(_ops(6)), "group": _log(_ops(6))}
    if lose:
        finals["idempotent"][0] = finals["idempotent"][0][:-1]
    txn = TransactionWorkload(clock, "x:1", "t", 2, seed=1)
    txn.txns = [Txn(0, 0, "commit", [(0, "a")], ended=9.0, outcome="committed")]
    finals["transactions"] = {0: [(0, "a")]}
    group = GroupWorkload(clock, "x:1", "g", 2, seed=1)
    group.commits = [Commit(0, 0, 3, 9.0)]
    workloads = {**producers, "transactions": txn, "group": group,
                 "reader": LiveReader("reader", clock, "x:1", "idempotent", 2),
                 "txn-reader": LiveReader("txn-reader", clock, "x:1", "t", 2, True)}
    opts = runner.Options(seed=1, duration=1, acks=acks)
    return runner._check(opts, [Event("kill", ["b1"], 0.0, 4.5)], workloads, finals, {0: 3},
                         {"b1": (0, "")}, [], end=10.0, recovered_at=5.0)


def test_loss_fails_an_acks_all_run_and_informs_an_acks_1_run() -> None:
    assert _judge("all", lose=False)["valid"] is True
    strict = _judge("all", lose=True)
    assert strict["valid"] is False and "lost: w-0-4" in str(strict["anomalies"])
    lossy = _judge("1", lose=True)
    assert lossy["valid"] is True and "lost: w-0-4" in str(lossy["informational"])
    assert lossy["table"]["kill"]["lost"] == 1  # w-0-4, sent at 4.0 s: the kill


def test_an_acknowledgement_without_an_offset_checks_presence_only() -> None:
    ops = _ops(4)
    ops[1].offset = -1
    total, _per_kind, notes = checker.check_producers(ops, _log(_ops(4)), [])
    assert notes == [] and total.acked_offset_unknown == 1 and total.offset_mismatch == 0
    total, _per_kind, notes = checker.check_producers(ops, _log([ops[0], ops[2], ops[3]]), [])
    assert total.lost == 1
