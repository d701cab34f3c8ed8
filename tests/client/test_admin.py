"""klog.client.admin against a real klog broker (one per module)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from klog.client.admin import (
    AdminClient,
    AlterConfigOp,
    ConfigResource,
    ListedOffset,
    NewPartitions,
    NewTopic,
)
from klog.client.errors import KafkaClientError
from klog.protocol.records.v2 import BatchBuilder
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(60)

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with KlogBroker(tmp_path_factory.mktemp("admin")) as b:
        yield b


def run(broker: KlogBroker, body: Any) -> Any:
    async def main() -> Any:
        async with AdminClient(broker.bootstrap_servers) as admin:
            return await body(admin)

    return asyncio.run(asyncio.wait_for(main(), 30))


async def produce(admin: AdminClient, topic: str, partition: int, count: int) -> None:
    builder = BatchBuilder()
    for i in range(count):
        builder.append(BASE_TS + i * 1000, f"k{i}".encode(), f"v{i}".encode())
    leader = await admin.client.leader_for(topic, partition)
    response = await admin.client.send(leader, 0, {
        "acks": -1, "timeout": 5000, "transactional_id": None, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition,
                                                "records": builder.build()}]}]})
    assert int(response.responses[0].partition_responses[0].error_code) == 0


def test_create_list_describe_delete_topics(broker: KlogBroker) -> None:
    async def body(admin: AdminClient) -> None:
        result = await admin.create_topics([
            NewTopic("adm-a", 3, 1, configs={"retention.ms": "123456"}),
            NewTopic("adm-b"),
            NewTopic("adm-placed", replica_assignment={0: [0], 1: [0]}),
            NewTopic("adm-bad", 1, 7),
        ])
        assert result["adm-a"] is None and result["adm-b"] is None
        assert result["adm-placed"] is None
        assert isinstance(result["adm-bad"], KafkaClientError)
        assert result["adm-bad"].name == "INVALID_REPLICATION_FACTOR"
        again = await admin.create_topics([NewTopic("adm-a", 1, 1)])
        assert again["adm-a"] is not None and again["adm-a"].error_code == 36
        dry = await admin.create_topics([NewTopic("adm-dry", 2, 1)], validate_only=True)
        assert dry == {"adm-dry": None}

        listed = await admin.list_topics()
        assert {"adm-a", "adm-b", "adm-placed"} <= set(listed)
        assert "adm-dry" not in listed
        assert len(listed["adm-a"].partitions) == 3
        assert len(listed["adm-placed"].partitions) == 2

        await produce(admin, "adm-a", 1, 5)
        described = await admin.describe_topics(["adm-a"])
        parts = described["adm-a"].partitions
        assert [p.partition for p in parts] == [0, 1, 2]
        assert [(p.log_start_offset, p.high_watermark) for p in parts] == [
            (0, 0), (0, 5), (0, 0)]
        assert all(p.leader == 0 and p.replicas == (0,) and p.isr == (0,) for p in parts)
        assert described["adm-a"].replication_factor == 1
        assert described["adm-a"].topic_id

        with pytest.raises(KafkaClientError) as info:
            await admin.describe_topics(["adm-missing"])
        assert info.value.error_code == 3

        deleted = await admin.delete_topics(["adm-b", "adm-missing"])
        assert deleted["adm-b"] is None
        assert deleted["adm-missing"] is not None and deleted["adm-missing"].error_code == 3
        for _ in range(100):
            if "adm-b" not in await admin.list_topics():
                break
            await asyncio.sleep(0.05)
        assert "adm-b" not in await admin.list_topics()

    run(broker, body)


def test_create_partitions(broker: KlogBroker) -> None:
    async def body(admin: AdminClient) -> None:
        assert (await admin.create_topics([NewTopic("adm-grow", 1, 1)]))["adm-grow"] is None
        result = await admin.create_partitions({"adm-grow": 3})
        assert result == {"adm-grow": None}
        placed = await admin.create_partitions({"adm-grow": NewPartitions(4, [[0]])})
        assert placed == {"adm-grow": None}
        shrink = await admin.create_partitions({"adm-grow": 2})
        assert shrink["adm-grow"] is not None and shrink["adm-grow"].name == "INVALID_PARTITIONS"
        for _ in range(100):
            described = await admin.describe_topics(["adm-grow"])
            if len(described["adm-grow"].partitions) == 4:
                break
            await asyncio.sleep(0.05)
        assert len(described["adm-grow"].partitions) == 4

    run(broker, body)


def test_list_offsets_and_delete_records(broker: KlogBroker) -> None:
    async def body(admin: AdminClient) -> None:
        assert (await admin.create_topics([NewTopic("adm-off", 1, 1)]))["adm-off"] is None
        await produce(admin, "adm-off", 0, 10)
        tp = ("adm-off", 0)
        offsets = await admin.list_offsets({tp: "earliest"})
        assert offsets[tp].offset == 0
        assert (await admin.list_offsets({tp: "latest"}))[tp].offset == 10
        by_time = await admin.list_offsets({tp: BASE_TS + 3500})
        assert by_time[tp] == ListedOffset(4, BASE_TS + 4000, 0)
        assert (await admin.list_offsets({tp: BASE_TS + 10_000}))[tp].offset == -1
        newest = await admin.list_offsets({tp: "max_timestamp"})
        assert (newest[tp].offset, newest[tp].timestamp) == (9, BASE_TS + 9000)

        low = await admin.delete_records({tp: 6})
        assert low == {tp: 6}
        assert (await admin.list_offsets({tp: "earliest"}))[tp].offset == 6
        described = await admin.describe_topics(["adm-off"])
        part = described["adm-off"].partitions[0]
        assert (part.log_start_offset, part.high_watermark) == (6, 10)

        with pytest.raises(KafkaClientError) as info:
            await admin.list_offsets({("adm-off", 9): "latest"})
        assert info.value.error_code == 3
        soft = await admin.list_offsets({("adm-off", 9): "latest", tp: "latest"},
                                        raise_errors=False)
        assert isinstance(soft[("adm-off", 9)], KafkaClientError)
        assert soft[tp].offset == 10
        with pytest.raises(ValueError):
            await admin.list_offsets({tp: "soonest"})

    run(broker, body)


def test_describe_and_alter_configs(broker: KlogBroker) -> None:
    async def body(admin: AdminClient) -> None:
        topic = ConfigResource.of("topic", "adm-cfg")
        created = await admin.create_topics(
            [NewTopic("adm-cfg", 1, 1, configs={"retention.ms": "60000"})])
        assert created["adm-cfg"] is None
        configs = await admin.describe_configs([topic, ConfigResource.of("broker", "0")])
        entries = {e.name: e for e in configs[topic]}
        assert entries["retention.ms"].value == "60000"
        assert entries["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
        assert entries["cleanup.policy"].is_default
        assert any(s.source == "DEFAULT_CONFIG" for s in entries["retention.ms"].synonyms)
        broker_entries = {e.name: e for e in configs[ConfigResource.of("broker", "0")]}
        assert broker_entries["broker.id"].value == "0"

        result = await admin.alter_configs({topic: [
            AlterConfigOp("retention.ms", None, "delete"),
            AlterConfigOp("segment.bytes", "1048576")]})
        assert result == {topic: None}
        after = await admin.describe_configs([topic], keys=["retention.ms", "segment.bytes"])
        values = {e.name: (e.value, e.source) for e in after[topic]}
        assert values["segment.bytes"] == ("1048576", "DYNAMIC_TOPIC_CONFIG")
        assert values["retention.ms"][1] == "DEFAULT_CONFIG"

        bad = await admin.alter_configs({topic: [AlterConfigOp("no.such.config", "1")]})
        assert bad[topic] is not None and bad[topic].name == "INVALID_CONFIG"
        with pytest.raises(KafkaClientError):
            await admin.describe_configs([ConfigResource.of("topic", "adm-nope")])
        with pytest.raises(ValueError):
            ConfigResource.of("group", "g")

    run(broker, body)


def test_describe_cluster_and_log_dirs(broker: KlogBroker) -> None:
    async def body(admin: AdminClient) -> None:
        cluster = await admin.describe_cluster()
        assert cluster.controller_id == 0 and cluster.cluster_id
        assert [(b.node_id, b.port) for b in cluster.brokers] == [(0, broker.port)]
        assert (await admin.create_topics([NewTopic("adm-dirs", 2, 1)]))["adm-dirs"] is None
        await produce(admin, "adm-dirs", 0, 3)
        dirs = await admin.describe_log_dirs()
        assert list(dirs) == [0]
        (log_dir,) = dirs[0]
        assert log_dir.error_code == 0 and log_dir.total_bytes > 0
        assert log_dir.replicas[("adm-dirs", 0)].size > 0
        assert log_dir.replicas[("adm-dirs", 1)].size == 0

    run(broker, body)


def test_group_offsets_alter_list_delete_and_group_admin(broker: KlogBroker) -> None:
    async def body(admin: AdminClient) -> None:
        assert (await admin.create_topics([NewTopic("grp-t", 2, 1)]))["grp-t"] is None
        # An admin commit (generation -1) creates the group with offsets and no members.
        errors = await admin.alter_group_offsets("adm-g", {("grp-t", 0): 0, ("grp-t", 1): 0})
        assert errors == {("grp-t", 0): None, ("grp-t", 1): None}
        offsets = await admin.list_group_offsets("adm-g")
        assert {tp: om.offset for tp, om in offsets.items()} == {
            ("grp-t", 0): 0, ("grp-t", 1): 0}
        assert list(await admin.list_group_offsets("adm-g", [("grp-t", 1)])) == [("grp-t", 1)]
        described = (await admin.describe_groups(["adm-g"]))["adm-g"]
        assert (described.state, described.members) == ("Empty", ())
        assert described.coordinator.node_id == 0
        listed = {g.group_id: g for g in await admin.list_groups()}
        assert listed["adm-g"].state == "Empty"
        assert "adm-g" not in {g.group_id for g in await admin.list_groups(["Stable"])}
        # OffsetDelete of one partition; then DeleteGroups of the rest.
        assert await admin.delete_group_offsets("adm-g", [("grp-t", 0)]) == {
            ("grp-t", 0): None}
        assert list(await admin.list_group_offsets("adm-g")) == [("grp-t", 1)]
        assert await admin.delete_groups(["adm-g"]) == {"adm-g": None}
        assert await admin.list_group_offsets("adm-g") == {}
        gone = await admin.delete_groups(["adm-g"])
        assert gone["adm-g"] is not None and gone["adm-g"].name == "GROUP_ID_NOT_FOUND"
        assert (await admin.describe_groups(["never-g"]))["never-g"].state == "Dead"

    run(broker, body)


def test_partition_reassignments_alter_cancel_list(broker: KlogBroker) -> None:
    # One broker (id 0): a move onto itself is accepted and done at once; the per-partition
    # refusals come back as values, as Kafka's AdminClient reports them.
    async def body(admin: AdminClient) -> None:
        assert (await admin.create_topics([NewTopic("adm-move", 2, 1)]))["adm-move"] is None
        errors = await admin.alter_partition_reassignments({
            ("adm-move", 0): [0], ("adm-move", 1): [7], ("adm-none", 0): [0]})
        assert errors[("adm-move", 0)] is None
        assert errors[("adm-move", 1)] is not None
        assert errors[("adm-move", 1)].name == "INVALID_REPLICA_ASSIGNMENT"
        assert errors[("adm-none", 0)] is not None
        assert errors[("adm-none", 0)].name == "UNKNOWN_TOPIC_OR_PARTITION"
        cancelled = await admin.alter_partition_reassignments({("adm-move", 0): None})
        assert cancelled[("adm-move", 0)] is not None
        assert cancelled[("adm-move", 0)].name == "NO_REASSIGNMENT_IN_PROGRESS"
        assert await admin.list_partition_reassignments() == {}
        assert await admin.list_partition_reassignments([("adm-move", 0)]) == {}

    run(broker, body)


def test_list_transactions_duration_filter_needs_list_transactions_v1(
        broker: KlogBroker) -> None:
    """KIP-994's filter goes in ListTransactions v1; against a broker that has only v0 the
    admin client says so (UNSUPPORTED_VERSION) rather than list unfiltered, as Kafka's."""
    from klog.protocol.errors import ErrorCode

    async def body(admin: AdminClient) -> None:
        assert isinstance(await admin.list_transactions(duration_filter_ms=1000), list)
        (node,) = admin.client.cluster.brokers
        admin.client._api_versions[node][66] = (0, 0)  # as a Kafka before 3.8 announces
        with pytest.raises(KafkaClientError) as refused:
            await admin.list_transactions(duration_filter_ms=1000)
        assert refused.value.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert isinstance(await admin.list_transactions(), list)  # v0 without the filter

    run(broker, body)
