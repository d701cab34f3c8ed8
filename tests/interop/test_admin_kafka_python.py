"""kafka-python's KafkaAdminClient against one klog broker: the admin APIs it negotiates
(CreateTopics v7, DeleteTopics v6 by name and by topic id, CreatePartitions, DeleteRecords,
DescribeConfigs, AlterConfigs and IncrementalAlterConfigs, DescribeCluster,
DescribeLogDirs), checked against what the broker then does."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import AlterConfigOp, ConfigResource, KafkaAdminClient
from kafka.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    KafkaError,
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka.structs import TopicPartition

from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"num.partitions": "2"}


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    yield client
    client.close()


def _topics(admin: KafkaAdminClient) -> set[str]:
    return set(admin.list_topics())


def _partition_count(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        return len(consumer.partitions_for_topic(topic) or ())
    finally:
        consumer.close()


def _send(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    try:
        for value in values:
            producer.send(topic, value, partition=partition).get(timeout=20)
    finally:
        producer.close()


def _topic_configs(admin: KafkaAdminClient, topic: str, **kw: Any) -> dict[str, Any]:
    out = admin.describe_configs([ConfigResource("TOPIC", topic)], config_filter="all", **kw)
    return out["topic"][topic]


def test_create_topics(admin: KafkaAdminClient, bootstrap: str) -> None:
    response = admin.create_topics({
        "kp-made": {"num_partitions": 3, "configs": {"retention.ms": "120000"}},
        "kp-default": {},
        "kp-assigned": {"assignments": {0: [0], 1: [0]}},
    }, timeout_ms=20000)
    results = {t["name"]: t for t in response["topics"]}
    assert {n: r["error_code"] for n, r in results.items()} == {
        "kp-made": 0, "kp-default": 0, "kp-assigned": 0}
    made = results["kp-made"]
    assert (made["num_partitions"], made["replication_factor"]) == (3, 1)
    assert made["configs"]["retention.ms"]["value"] == "120000"
    assert made["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    uuid.UUID(str(made["topic_id"]))
    assert results["kp-default"]["num_partitions"] == 2
    assert {"kp-made", "kp-default", "kp-assigned"} <= _topics(admin)
    assert _partition_count(bootstrap, "kp-made") == 3
    assert _partition_count(bootstrap, "kp-assigned") == 2
    dry = admin.create_topics({"kp-dry": {"num_partitions": 5}}, validate_only=True)
    assert dry["topics"][0]["error_code"] == 0
    assert "kp-dry" not in _topics(admin)
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({"kp-made": {}})
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics({"kp-wide": {"replication_factor": 3}})


def test_delete_topics_by_name_and_by_id(admin: KafkaAdminClient) -> None:
    created = admin.create_topics({"kp-del-name": {}, "kp-del-id": {}}, timeout_ms=20000)
    ids = {t["name"]: t["topic_id"] for t in created["topics"]}
    by_name = admin.delete_topics(["kp-del-name"], timeout_ms=20000)
    assert [(t["name"], t["error_code"]) for t in by_name["topics"]] == [("kp-del-name", 0)]
    by_id = admin.delete_topics([uuid.UUID(str(ids["kp-del-id"]))], timeout_ms=20000)
    assert [(t["name"], t["error_code"]) for t in by_id["topics"]] == [("kp-del-id", 0)]
    assert not {"kp-del-name", "kp-del-id"} & _topics(admin)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kp-del-name"])
    assert admin.create_topics({"kp-del-name": {}})["topics"][0]["error_code"] == 0


def test_create_partitions(admin: KafkaAdminClient, bootstrap: str) -> None:
    admin.create_topics({"kp-grow": {"num_partitions": 1}}, timeout_ms=20000)
    admin.create_partitions({"kp-grow": 2}, validate_only=True)
    assert _partition_count(bootstrap, "kp-grow") == 1
    response = admin.create_partitions({"kp-grow": 3}, timeout_ms=20000)
    assert [r.error_code for r in response.results] == [0]
    assert _partition_count(bootstrap, "kp-grow") == 3
    admin.create_partitions({"kp-grow": {"count": 4, "assignments": [[0]]}})
    assert _partition_count(bootstrap, "kp-grow") == 4
    _send(bootstrap, "kp-grow", [b"late"], partition=3)
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"kp-grow": 4})


def test_describe_configs_with_synonyms(admin: KafkaAdminClient) -> None:
    admin.create_topics({"kp-conf": {"configs": {"segment.ms": "600000"}}}, timeout_ms=20000)
    configs = _topic_configs(admin, "kp-conf", include_synonyms=True)
    entry = configs["segment.ms"]
    assert (entry["value"], entry["config_source"], entry["config_type"]) == (
        "600000", "DYNAMIC_TOPIC_CONFIG", "LONG")
    assert [(s["name"], s["source"]) for s in entry["synonyms"]] == [
        ("segment.ms", "DYNAMIC_TOPIC_CONFIG"), ("log.roll.hours", "DEFAULT_CONFIG")]
    assert configs["cleanup.policy"]["config_type"] == "LIST"
    modified = admin.describe_configs([ConfigResource("TOPIC", "kp-conf")])
    assert set(modified["topic"]["kp-conf"]) == {"segment.ms"}
    brokers = admin.describe_configs([ConfigResource("BROKER", "0")], config_filter="all")
    broker_configs = brokers["broker"]["0"]
    assert broker_configs["num.partitions"]["value"] == "2"
    assert broker_configs["num.partitions"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert broker_configs["zookeeper.connect"]["read_only"] is True


def test_alter_configs_both_apis(admin: KafkaAdminClient, bootstrap: str) -> None:
    admin.create_topics({"kp-alter": {"configs": {"retention.ms": "5000"}}}, timeout_ms=20000)
    # AlterConfigs (the old API; kafka-python resends the other modified keys itself, as
    # the request replaces every override)
    result = admin.alter_configs([ConfigResource("TOPIC", "kp-alter", {"segment.ms": "7000"})],
                                 incremental=False)
    assert result == {"topic": {"kp-alter": "OK"}}
    configs = _topic_configs(admin, "kp-alter")
    assert (configs["segment.ms"]["value"], configs["retention.ms"]["value"]) == (
        "7000", "5000")
    # IncrementalAlterConfigs: only the named keys change
    result = admin.alter_configs([ConfigResource("TOPIC", "kp-alter", {
        "max.message.bytes": "1024",
        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
        "segment.ms": (AlterConfigOp.DELETE, None),
    })], incremental=True)
    assert result == {"topic": {"kp-alter": "OK"}}
    configs = _topic_configs(admin, "kp-alter")
    assert configs["max.message.bytes"]["value"] == "1024"
    assert configs["cleanup.policy"]["value"] == "delete,compact"
    assert configs["segment.ms"]["config_source"] == "DEFAULT_CONFIG"
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=0)
    try:
        with pytest.raises(KafkaError) as info:
            producer.send("kp-alter", b"z" * 4000, key=b"k", partition=0).get(timeout=20)
        assert "MessageSizeTooLarge" in type(info.value).__name__
    finally:
        producer.close()
    broker = admin.alter_configs([ConfigResource("BROKER", "0", {
        "log.cleaner.delete.retention.ms": "3000"})])
    assert broker == {"broker": {"0": "OK"}}
    entry = admin.describe_configs([ConfigResource("BROKER", "0")])["broker"]["0"]
    assert entry["log.cleaner.delete.retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
    admin.alter_configs([ConfigResource("BROKER", "0", {
        "log.cleaner.delete.retention.ms": (AlterConfigOp.DELETE, None)})])
    entry = admin.describe_configs([ConfigResource("BROKER", "0")])["broker"]["0"]
    assert "log.cleaner.delete.retention.ms" not in entry


def test_delete_records(admin: KafkaAdminClient, bootstrap: str) -> None:
    admin.create_topics({"kp-trim": {"num_partitions": 1}}, timeout_ms=20000)
    _send(bootstrap, "kp-trim", [b"%d" % i for i in range(8)])
    tp = TopicPartition("kp-trim", 0)
    result = admin.delete_records({tp: 5})
    assert result[tp]["low_watermark"] == 5
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 5
        assert [m.offset for m in consumer] == [5, 6, 7]
    finally:
        consumer.close()
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp: 9})


def test_describe_cluster(admin: KafkaAdminClient, broker: KlogBroker) -> None:
    cluster = admin.describe_cluster()
    assert cluster["controller_id"] == 0
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (0, broker.host, broker.port)]
    assert cluster["cluster_id"]
    assert set(cluster["authorized_operations"]) == {
        "CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE"}


def test_describe_log_dirs(admin: KafkaAdminClient, broker: KlogBroker,
                           bootstrap: str) -> None:
    admin.create_topics({"kp-dirs": {"num_partitions": 2}}, timeout_ms=20000)
    _send(bootstrap, "kp-dirs", [b"q" * 300] * 3, partition=1)
    (per_broker,) = admin.describe_log_dirs({"kp-dirs": [0, 1]})
    assert per_broker["broker"] == 0
    (log_dir,) = per_broker["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(broker.log_dir.absolute())
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    (topic,) = log_dir["topics"]
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    assert sizes[0] == 0 and sizes[1] > 900
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in topic["partitions"])
