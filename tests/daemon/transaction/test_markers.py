"""Tests for klog.daemon.transaction.markers: the partition side (control batches through
the replica manager, the __consumer_offsets hook) and the coordinator side's retries."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from klog.daemon.replica_results import ProduceResult
from klog.daemon.transaction import markers
from klog.daemon.transaction.markers import MarkerWriter, TransactionMarkerChannelManager
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import read_batch_header
from klog.protocol.records.control import ControlRecordType, EndTransactionMarker
from klog.protocol.records.v2 import iter_records
from klog.storage.validator import AppendOrigin

CONFIG = SimpleNamespace(current=SimpleNamespace(request_timeout_ms=1000))


class FakeReplicaManager:
    def __init__(self, answers: dict[tuple[str, int], list[int]] | None = None) -> None:
        self.answers = answers or {}
        self.appended: list[tuple[tuple[str, int], bytes, str]] = []

    def append_records(self, entries: dict[tuple[str, int], Any], acks: int,
                       origin: AppendOrigin) -> dict[tuple[str, int], ProduceResult]:
        assert acks == -1
        out = {}
        for tp, records in entries.items():
            code = self.answers.get(tp, [0]).pop(0) if self.answers.get(tp) else 0
            if code == 0:
                self.appended.append((tp, bytes(records), origin))
            out[tp] = ProduceResult(code)
        return out

    async def wait_for_isr(self, results: Any, timeout_ms: int) -> Any:
        return results


def test_writer_appends_control_batches_and_tells_the_offsets_listener() -> None:
    rm = FakeReplicaManager({("gone", 0): [int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]})
    writer = MarkerWriter(CONFIG, rm)  # type: ignore[arg-type]
    heard: list[tuple[int, int, bool]] = []
    writer.add_listener(lambda p, pid, committed: heard.append((p, pid, committed)))
    out = asyncio.run(writer.write(42, 3, 7, True, [("a", 0), ("__consumer_offsets", 5),
                                                    ("gone", 0)]))
    assert out == {("a", 0): 0, ("__consumer_offsets", 5): 0,
                   ("gone", 0): int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    assert heard == [(5, 42, True)]
    tp, data, origin = rm.appended[0]
    header = read_batch_header(data)
    assert (tp, origin, header.producer_id, header.producer_epoch, header.is_control,
            header.is_transactional) == (("a", 0), AppendOrigin.COORDINATOR, 42, 3, True, True)
    (record,) = iter_records(data, header)
    assert EndTransactionMarker.from_record(record) == EndTransactionMarker(
        ControlRecordType.COMMIT, 7)


def test_channel_retries_until_every_partition_has_its_marker(monkeypatch: Any) -> None:
    monkeypatch.setattr(markers, "RETRY_BACKOFF_S", 0)
    leaders = {("a", 0): [-1, 0], ("a", 1): [0], ("deleted", 0): [None]}

    def partition_state(topic: str, partition: int) -> Any:
        seq = leaders[(topic, partition)]
        leader = seq.pop(0) if len(seq) > 1 else seq[0]
        return None if leader is None else SimpleNamespace(leader=leader)

    rm = FakeReplicaManager({("a", 1): [int(ErrorCode.NOT_ENOUGH_REPLICAS)]})
    writer = MarkerWriter(CONFIG, rm)  # type: ignore[arg-type]
    cache = SimpleNamespace(partition_state=partition_state)

    async def no_endpoint(broker_id: int) -> None:
        return None

    channel = TransactionMarkerChannelManager(0, CONFIG, cache, writer,  # type: ignore[arg-type]
                                              no_endpoint)
    done = asyncio.run(channel.send_markers(42, 3, 7, False,
                                            [("a", 0), ("a", 1), ("deleted", 0)],
                                            lambda: True))
    assert done
    assert sorted(tp for tp, _d, _o in rm.appended) == [("a", 0), ("a", 1)]


def test_channel_gives_up_when_fenced_or_no_longer_current(monkeypatch: Any) -> None:
    monkeypatch.setattr(markers, "RETRY_BACKOFF_S", 0)
    cache = SimpleNamespace(partition_state=lambda t, p: SimpleNamespace(leader=0))
    rm = FakeReplicaManager({("a", 0): [int(ErrorCode.INVALID_PRODUCER_EPOCH)]})
    writer = MarkerWriter(CONFIG, rm)  # type: ignore[arg-type]

    async def no_endpoint(broker_id: int) -> None:
        return None

    channel = TransactionMarkerChannelManager(0, CONFIG, cache, writer,  # type: ignore[arg-type]
                                              no_endpoint)
    assert not asyncio.run(channel.send_markers(42, 3, 7, True, [("a", 0)], lambda: True))
    assert not asyncio.run(channel.send_markers(42, 3, 7, True, [("a", 1)], lambda: False))
    assert rm.appended == []
