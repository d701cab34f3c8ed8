"""AlterPartitionReassignments and ListPartitionReassignments against a real standalone
broker (its own controller), through klog's admin client: Kafka's per-partition errors,
a reassignment to the current replicas completing at once, nothing listed when nothing
moves. (Moves between brokers: tests/cluster/test_reassignment.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from klog.client.admin import AdminClient, NewTopic
from klog.protocol.errors import ErrorCode


def test_reassignment_apis_on_a_standalone_broker(klog_broker: Any) -> None:
    async def main() -> None:
        async with AdminClient(klog_broker.bootstrap_servers) as admin:
            created = await admin.create_topics([NewTopic("t", 2, 1)])
            assert created == {"t": None}
            described = await admin.describe_cluster()
            me = described.controller_id
            assert me >= 0
            assert await admin.list_partition_reassignments() == {}
            results = await admin.alter_partition_reassignments({
                ("t", 0): [me],              # the current replicas: done at once
                ("t", 1): [me + 100],        # not a live broker
                ("t", 7): [me],              # no such partition
                ("nope", 0): [me],           # no such topic
            })
            assert results[("t", 0)] is None
            codes = {tp: e.error_code for tp, e in results.items() if e is not None}
            assert codes == {
                ("t", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            }
            assert "not alive" in str(results[("t", 1)])
            cancel = await admin.alter_partition_reassignments({("t", 0): None})
            assert cancel[("t", 0)] is not None
            assert cancel[("t", 0)].error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
            dupes = await admin.alter_partition_reassignments({("t", 1): [me, me]})
            assert dupes[("t", 1)] is not None
            assert dupes[("t", 1)].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
            assert await admin.list_partition_reassignments([("t", 0), ("t", 1)]) == {}

    asyncio.run(main())


def test_kafka_python_admin_cross_check(klog_broker: Any) -> None:
    """kafka-python's admin client (its own encoding of both APIs) gets the same answers."""
    kafka = pytest.importorskip("kafka")
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import InvalidReplicationAssignmentError, NoReassignmentInProgressError

    admin = KafkaAdminClient(bootstrap_servers=klog_broker.bootstrap_servers,
                             request_timeout_ms=10000)
    try:
        admin.create_topics([KNewTopic("k", 1, 1)])
        me = admin.describe_cluster()["controller_id"]
        assert admin.list_partition_reassignments() == {}
        tp = TopicPartition("k", 0)
        results = admin.alter_partition_reassignments({tp: [me + 100]})
        assert results[tp] is InvalidReplicationAssignmentError
        assert admin.alter_partition_reassignments({tp: None})[tp] is \
            NoReassignmentInProgressError
        assert admin.alter_partition_reassignments({tp: [me]})[tp] is None
        assert admin.list_partition_reassignments([tp]) == {}
    finally:
        admin.close()
    assert kafka is not None
