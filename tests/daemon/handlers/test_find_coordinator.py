"""FindCoordinator over a real socket: every version, batched keys, topic creation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from klog.daemon.group.metadata_manager import OFFSETS_TOPIC
from klog.protocol.errors import ErrorCode
from tests.daemon.wire import InProcessBroker

FIND_COORDINATOR = 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = InProcessBroker(tmp_path, {"offsets.topic.num.partitions": "7"}).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_single_key(broker: InProcessBroker, version: int) -> None:
    values = {"key": "my-group", "key_type": 0}
    with broker.connect() as client:
        response = client.call(FIND_COORDINATOR, version, values)
    assert response.error_code == ErrorCode.NONE
    assert (response.node_id, response.host, response.port) == (
        broker.broker.broker_id, "127.0.0.1", broker.port)
    if version >= 1:
        assert response.error_message == "NONE"
    # Created on first use: compacted, offsets.topic.num.partitions partitions.
    cache = broker.broker.metadata_cache
    assert len(broker.call(lambda: cache.partitions(OFFSETS_TOPIC))) == 7
    overrides = broker.call(lambda: broker.broker.topic_configs.load(OFFSETS_TOPIC))
    assert overrides["cleanup.policy"] == "compact"


@pytest.mark.parametrize("version", [4, 5, 6])
def test_batched_keys(broker: InProcessBroker, version: int) -> None:
    keys = ["a", "b", "group-c", ""]
    with broker.connect() as client:
        groups = client.call(FIND_COORDINATOR, version, {"key_type": 0,
                                                         "coordinator_keys": keys})
        txns = client.call(FIND_COORDINATOR, version, {"key_type": 1,
                                                       "coordinator_keys": ["t1", "t2"]})
        unknown = client.call(FIND_COORDINATOR, version, {"key_type": 9,
                                                          "coordinator_keys": ["x"]})
    assert [c.key for c in groups.coordinators] == keys
    for c in groups.coordinators:
        assert c.error_code == ErrorCode.NONE
        assert (c.node_id, c.host, c.port) == (broker.broker.broker_id, "127.0.0.1",
                                               broker.port)
    # Transactional ids: the leader of their __transaction_state partition.
    assert [(c.key, c.error_code, c.node_id, c.port) for c in txns.coordinators] == [
        ("t1", ErrorCode.NONE, 0, broker.port), ("t2", ErrorCode.NONE, 0, broker.port)]
    assert [(c.key, c.error_code) for c in unknown.coordinators] == [
        ("x", ErrorCode.INVALID_REQUEST)]


def test_transaction_key_v1(broker: InProcessBroker) -> None:
    with broker.connect() as client:
        response = client.call(FIND_COORDINATOR, 1, {"key": "txn", "key_type": 1})
    assert response.error_code == ErrorCode.NONE
    assert response.node_id == broker.broker.broker_id
    # Created on first use: compacted, transaction.state.log.num.partitions (50).
    cache = broker.broker.metadata_cache
    assert len(broker.call(lambda: cache.partitions("__transaction_state"))) == 50
    overrides = broker.call(lambda: broker.broker.topic_configs.load("__transaction_state"))
    assert overrides["cleanup.policy"] == "compact"
    assert overrides["min.insync.replicas"] == "1"


def test_offsets_topic_cannot_be_created(tmp_path: Path) -> None:
    # A replication factor above the number of brokers: no topic, no coordinator.
    b = InProcessBroker(tmp_path, {"offsets.topic.replication.factor": "3"}).start()
    try:
        with b.connect() as client:
            response = client.call(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert b.call(lambda: b.broker.metadata_cache.contains_topic(OFFSETS_TOPIC)) is False
    finally:
        b.stop()

