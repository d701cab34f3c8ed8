"""Tests for klog.daemon.transaction.state_manager: partitions of __transaction_state
loaded on leadership (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and dropped on its loss;
Kafka's hash; the topic's configs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from klog.daemon.metadata_cache import PartitionState
from klog.daemon.transaction.metadata import ONGOING, TransactionMetadata
from klog.daemon.transaction.state_manager import (
    TRANSACTION_STATE_TOPIC,
    TransactionStateManager,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import TransactionLogKey
from klog.protocol.records.v2 import BatchBuilder
from klog.storage.config import LogConfig
from klog.storage.log import PartitionLog
from klog.storage.validator import AppendOrigin

CONFIG = SimpleNamespace(current=SimpleNamespace(
    transaction_state_log_num_partitions=50, transaction_state_log_load_buffer_size=64,
    transaction_state_log_min_isr=2, transaction_state_log_segment_bytes=104857600))


def _manager(plog: PartitionLog | None = None) -> TransactionStateManager:
    rm = SimpleNamespace(get_partition=lambda t, p: None if plog is None
                         else SimpleNamespace(log=plog))
    cache = SimpleNamespace(partitions=lambda topic: [])
    return TransactionStateManager(1, CONFIG, cache, rm, None)  # type: ignore[arg-type]


def test_partition_is_kafkas_hash() -> None:
    sm = _manager()
    # abs(String.hashCode) % 50, as Kafka's TransactionStateManager.partitionFor.
    assert sm.partition_for("my-txn") == abs(-1061187895) % 50 == 45
    assert sm.partition_for("") == 0
    configs = sm.topic_configs()
    assert configs["cleanup.policy"] == "compact"
    assert configs["min.insync.replicas"] == "2"
    assert configs["segment.bytes"] == "104857600"


def test_load_on_leadership_and_unload_on_its_loss(tmp_path: Path) -> None:
    plog = PartitionLog(tmp_path / f"{TRANSACTION_STATE_TOPIC}-45", LogConfig())
    md = TransactionMetadata("my-txn", 7, producer_epoch=2, state=ONGOING,
                             partitions={("a", 0)}, txn_start_timestamp=5)
    for i in range(20):  # many records: the load reads in several chunks of 64 bytes
        builder = BatchBuilder()
        value = md.prepare_add_partitions({("a", i)}, now=10 + i)
        md.complete_transition(value)
        builder.append(10 + i, TransactionLogKey("my-txn").encode(),
                       value.to_log_value().encode())
        plog.append_as_leader(builder.build(), 0, origin=AppendOrigin.COORDINATOR)
    sm = _manager(plog)
    loaded: list[tuple[int, int, list[str]]] = []
    sm.on_loaded = lambda p, e, mds: loaded.append((p, e, [m.transactional_id for m in mds]))

    async def go() -> None:
        assert sm.coordinator_error("my-txn") is ErrorCode.NOT_COORDINATOR
        other = PartitionState("other", 45, 1, 4, (1,), (1,))
        follower = PartitionState(TRANSACTION_STATE_TOPIC, 44, 2, 4, (1, 2), (1, 2))
        leader = PartitionState(TRANSACTION_STATE_TOPIC, 45, 1, 4, (1, 2), (1, 2))
        sm.on_leader_and_isr([other, follower, leader], {})
        assert sm.coordinator_error("my-txn") is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert sm.loading_partitions() == {45}
        for _ in range(100):
            if not sm.loading_partitions():
                break
            await asyncio.sleep(0.01)
        assert sm.coordinator_error("my-txn") is None
        error, epoch, got = sm.get("my-txn")
        assert (error, epoch) == (None, 4) and got is not None
        assert got.partitions == {("a", i) for i in range(20)} and got.producer_epoch == 2
        assert loaded == [(45, 4, ["my-txn"])]
        unloaded: list[int] = []
        sm.on_unloaded = unloaded.append
        sm.on_stop_replica([(TRANSACTION_STATE_TOPIC, 45)])
        assert unloaded == [45]
        assert sm.coordinator_error("my-txn") is ErrorCode.NOT_COORDINATOR

    asyncio.run(go())
