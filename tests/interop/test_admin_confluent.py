"""librdkafka's AdminClient (confluent-kafka) against one klog broker: the admin APIs.

Every test checks an effect beyond the client's "ok": topics in metadata, configs a
describe reads back, a producer refused by a lowered max.message.bytes, a consumer that
starts at the new low watermark, dynamic configs still there after a restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"num.partitions": "3"}


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _results(futures: dict[Any, Any]) -> dict[Any, Any]:
    """Each future's result, or the KafkaError it failed with."""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout=30)
        except KafkaException as exc:
            out[key] = exc.args[0]
    return out


def _code(outcome: Any) -> int:
    return outcome.code() if isinstance(outcome, KafkaError) else 0


def _partitions(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def _topic_config(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    (result,) = _results(admin.describe_configs([ConfigResource("topic", topic)])).values()
    return result


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0,
             key: bytes | None = None, **conf: Any) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "message.timeout.ms": 10000, "enable.idempotence": False, **conf})
    for value in values:
        producer.produce(topic, value, key, partition=partition,
                         on_delivery=lambda err, msg: errors.append(err))
    producer.flush(20)
    return errors


def _consume_offsets(bootstrap: str, topic: str, partition: int, start: int,
                     expect: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-interop",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, partition, start)])
    offsets: list[int] = []
    deadline = time.monotonic() + 20
    try:
        while len(offsets) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                offsets.append(msg.offset())
    finally:
        consumer.close()
    return offsets


def _wait_for_topic(bootstrap: str, topic: str, timeout: float = 20) -> None:
    """Until the broker's metadata shows ``topic`` with a leader. A restarted broker opens
    its port a moment before its controller has filled the metadata in."""
    probe = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = probe.list_topics(timeout=5)
        t = meta.topics.get(topic)
        if meta.brokers and t is not None and t.error is None and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{topic} did not come back")


# -- CreateTopics ----------------------------------------------------------------------------


def test_create_topics_with_counts_defaults_and_configs(admin: AdminClient) -> None:
    got = _results(admin.create_topics([
        NewTopic("cf-sized", 4, 1, config={"retention.ms": "3600000",
                                           "cleanup.policy": "compact"}),
        NewTopic("cf-defaults"),  # -1/-1: the broker's num.partitions and replication factor
    ], operation_timeout=20))
    assert got == {"cf-sized": None, "cf-defaults": None}
    assert _partitions(admin, "cf-sized") == 4
    assert _partitions(admin, "cf-defaults") == 3
    configs = _topic_config(admin, "cf-sized")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].is_default


def test_create_topics_validate_only_creates_nothing(admin: AdminClient) -> None:
    got = _results(admin.create_topics([NewTopic("cf-dry", 2, 1)], validate_only=True))
    assert got == {"cf-dry": None}
    assert "cf-dry" not in admin.list_topics(timeout=10).topics
    bad = _results(admin.create_topics([NewTopic("cf-dry", 2, 5)], validate_only=True))
    assert _code(bad["cf-dry"]) == KafkaError.INVALID_REPLICATION_FACTOR


def test_create_topics_with_replica_assignment(admin: AdminClient) -> None:
    got = _results(admin.create_topics(
        [NewTopic("cf-assigned", 3, replica_assignment=[[0], [0], [0]])]))
    assert got == {"cf-assigned": None}
    meta = admin.list_topics("cf-assigned", timeout=10).topics["cf-assigned"]
    assert {p: (m.leader, list(m.replicas)) for p, m in meta.partitions.items()} == {
        0: (0, [0]), 1: (0, [0]), 2: (0, [0])}
    bad = _results(admin.create_topics(
        [NewTopic("cf-assigned-bad", 1, replica_assignment=[[7]])]))
    assert _code(bad["cf-assigned-bad"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_create_topics_errors(admin: AdminClient) -> None:
    assert _results(admin.create_topics([NewTopic("cf-taken", 1, 1)])) == {"cf-taken": None}
    got = _results(admin.create_topics([
        NewTopic("cf-taken", 1, 1),
        NewTopic("cf-wide", 1, 2),
        NewTopic("cf-badconfig", 1, 1, config={"retention.ms": "forever"}),
        NewTopic("cf-unknownconfig", 1, 1, config={"no.such.thing": "1"}),
        NewTopic("cf-zero", 0, 1),
        NewTopic("bad name", 1, 1),
    ]))
    assert {k: _code(v) for k, v in got.items()} == {
        "cf-taken": KafkaError.TOPIC_ALREADY_EXISTS,
        "cf-wide": KafkaError.INVALID_REPLICATION_FACTOR,
        "cf-badconfig": KafkaError.INVALID_CONFIG,
        "cf-unknownconfig": KafkaError.INVALID_CONFIG,
        "cf-zero": KafkaError.INVALID_PARTITIONS,
        "bad name": KafkaError.TOPIC_EXCEPTION,
    }
    assert "Replication factor: 2 larger than available brokers: 1." in got["cf-wide"].str()
    names = admin.list_topics(timeout=10).topics
    assert not {"cf-wide", "cf-badconfig", "cf-zero"} & set(names)


# -- DeleteTopics ----------------------------------------------------------------------------


def test_delete_topics_and_create_again(admin: AdminClient, bootstrap: str) -> None:
    assert _results(admin.create_topics([NewTopic("cf-doomed", 2, 1)])) == {"cf-doomed": None}
    assert _produce(bootstrap, "cf-doomed", [b"a", b"b"]) == [None, None]
    got = _results(admin.delete_topics(["cf-doomed", "cf-never-was"], operation_timeout=20))
    assert got["cf-doomed"] is None
    assert _code(got["cf-never-was"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "cf-doomed" not in admin.list_topics(timeout=10).topics
    # gone from the metastore too: it can be created again right away, empty
    assert _results(admin.create_topics([NewTopic("cf-doomed", 1, 1)])) == {"cf-doomed": None}
    assert _produce(bootstrap, "cf-doomed", [b"c"]) == [None]
    assert _consume_offsets(bootstrap, "cf-doomed", 0, OFFSET_BEGINNING, 1) == [0]


# -- CreatePartitions ------------------------------------------------------------------------


def test_create_partitions(admin: AdminClient, bootstrap: str) -> None:
    assert _results(admin.create_topics([NewTopic("cf-grow", 1, 1)])) == {"cf-grow": None}
    assert _results(admin.create_partitions([NewPartitions("cf-grow", 3)],
                                            validate_only=True)) == {"cf-grow": None}
    assert _partitions(admin, "cf-grow") == 1
    assert _results(admin.create_partitions([NewPartitions("cf-grow", 3)],
                                            operation_timeout=20)) == {"cf-grow": None}
    assert _partitions(admin, "cf-grow") == 3
    assert _produce(bootstrap, "cf-grow", [b"new"], partition=2) == [None]
    assert _results(admin.create_partitions(
        [NewPartitions("cf-grow", 4, replica_assignment=[[0]])])) == {"cf-grow": None}
    assert _partitions(admin, "cf-grow") == 4
    got = _results(admin.create_partitions([NewPartitions("cf-grow", 2)]))
    assert _code(got["cf-grow"]) == KafkaError.INVALID_PARTITIONS
    assert "Topic currently has 4 partitions, which is higher than the requested 2." in \
        got["cf-grow"].str()
    got = _results(admin.create_partitions([NewPartitions("cf-nowhere", 2)]))
    assert _code(got["cf-nowhere"]) == KafkaError.UNKNOWN_TOPIC_OR_PART


# -- DescribeConfigs -------------------------------------------------------------------------


def test_describe_broker_configs(admin: AdminClient) -> None:
    (configs,) = _results(admin.describe_configs([ConfigResource("broker", "0")])).values()
    assert configs["num.partitions"].value == "3"
    assert configs["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["broker.id"].is_read_only
    assert configs["log.retention.hours"].value == "168"
    assert configs["log.retention.hours"].source == ConfigSource.DEFAULT_CONFIG.value
    synonyms = configs["log.retention.hours"].synonyms
    assert synonyms["log.retention.hours"].source == ConfigSource.DEFAULT_CONFIG.value


def test_describe_topic_config_synonyms(admin: AdminClient) -> None:
    assert _results(admin.create_topics([NewTopic("cf-syn", 1, 1, config={
        "segment.bytes": "1048576"})])) == {"cf-syn": None}
    entry = _topic_config(admin, "cf-syn")["segment.bytes"]
    assert (entry.value, entry.source) == ("1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert list(entry.synonyms) == ["segment.bytes", "log.segment.bytes"]
    assert entry.synonyms["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    got = _results(admin.describe_configs([ConfigResource("topic", "cf-nowhere")]))
    assert _code(next(iter(got.values()))) == KafkaError.UNKNOWN_TOPIC_OR_PART


# -- AlterConfigs / IncrementalAlterConfigs ---------------------------------------------------


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_the_overrides(admin: AdminClient) -> None:
    assert _results(admin.create_topics([NewTopic("cf-alter", 1, 1, config={
        "retention.ms": "1000"})])) == {"cf-alter": None}
    resource = ConfigResource("topic", "cf-alter", set_config={"segment.ms": "60000"})
    assert list(_results(admin.alter_configs([resource])).values()) == [None]
    configs = _topic_config(admin, "cf-alter")
    assert configs["segment.ms"].value == "60000"
    assert configs["retention.ms"].value == "604800000"  # not in the new set: back to default
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    dry = ConfigResource("topic", "cf-alter", set_config={"segment.ms": "1"})
    assert list(_results(admin.alter_configs([dry], validate_only=True)).values()) == [None]
    assert _topic_config(admin, "cf-alter")["segment.ms"].value == "60000"
    bad = ConfigResource("topic", "cf-alter", set_config={"segment.ms": "soon"})
    (outcome,) = _results(admin.alter_configs([bad])).values()
    assert _code(outcome) == KafkaError.INVALID_CONFIG


def test_incremental_alter_configs_reach_the_live_log(admin: AdminClient,
                                                      bootstrap: str) -> None:
    assert _results(admin.create_topics([NewTopic("cf-inc", 1, 1)])) == {"cf-inc": None}
    big = b"x" * 5000
    assert _produce(bootstrap, "cf-inc", [big]) == [None]
    resource = ConfigResource("topic", "cf-inc", incremental_configs=[
        ConfigEntry("max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.APPEND),
    ])
    assert list(_results(admin.incremental_alter_configs([resource])).values()) == [None]
    configs = _topic_config(admin, "cf-inc")
    assert configs["max.message.bytes"].value == "2048"
    assert configs["cleanup.policy"].value == "delete,compact"
    (error,) = _produce(bootstrap, "cf-inc", [big])
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    resource = ConfigResource("topic", "cf-inc", incremental_configs=[
        ConfigEntry("max.message.bytes", None,
                    incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "delete",
                    incremental_operation=AlterConfigOpType.SUBTRACT),
    ])
    assert list(_results(admin.incremental_alter_configs([resource])).values()) == [None]
    configs = _topic_config(admin, "cf-inc")
    assert configs["cleanup.policy"].value == "compact"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    # compacted now: a record needs a key (Kafka's LogValidator)
    (error,) = _produce(bootstrap, "cf-inc", [big])
    assert error is not None and error.code() == KafkaError.INVALID_RECORD
    assert _produce(bootstrap, "cf-inc", [big], key=b"k") == [None]


def test_incremental_alter_broker_configs(admin: AdminClient) -> None:
    def describe() -> ConfigEntry:
        (configs,) = _results(admin.describe_configs([ConfigResource("broker", "0")])).values()
        return configs["log.cleaner.delete.retention.ms"]

    def alter(op: AlterConfigOpType, value: str | None) -> Any:
        resource = ConfigResource("broker", "0", incremental_configs=[
            ConfigEntry("log.cleaner.delete.retention.ms", value, incremental_operation=op)])
        (outcome,) = _results(admin.incremental_alter_configs([resource])).values()
        return outcome

    # (librdkafka refuses the cluster default resource "" itself; kafka-python's test
    # covers it)
    assert alter(AlterConfigOpType.SET, "4000") is None
    entry = describe()
    assert (entry.value, entry.source) == ("4000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert alter(AlterConfigOpType.DELETE, None) is None
    entry = describe()
    assert (entry.value, entry.source) == ("86400000", ConfigSource.DEFAULT_CONFIG.value)
    resource = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("broker.id", "5", incremental_operation=AlterConfigOpType.SET)])
    (outcome,) = _results(admin.incremental_alter_configs([resource])).values()
    assert _code(outcome) == KafkaError.INVALID_REQUEST


# -- DeleteRecords ---------------------------------------------------------------------------


def test_delete_records(admin: AdminClient, bootstrap: str) -> None:
    assert _results(admin.create_topics([NewTopic("cf-trim", 2, 1)])) == {"cf-trim": None}
    assert _produce(bootstrap, "cf-trim", [b"%d" % i for i in range(10)]) == [None] * 10
    assert _produce(bootstrap, "cf-trim", [b"a", b"b", b"c"], partition=1) == [None] * 3
    got = _results(admin.delete_records([TopicPartition("cf-trim", 0, 4),
                                         TopicPartition("cf-trim", 1, OFFSET_END)]))
    assert {tp.partition: r.low_watermark for tp, r in got.items()} == {0: 4, 1: 3}
    assert _consume_offsets(bootstrap, "cf-trim", 0, OFFSET_BEGINNING, 6) == list(range(4, 10))
    got = _results(admin.delete_records([TopicPartition("cf-trim", 0, 11)]))
    (outcome,) = got.values()
    assert _code(outcome) == KafkaError.OFFSET_OUT_OF_RANGE


# -- DescribeCluster -------------------------------------------------------------------------


def test_describe_cluster(admin: AdminClient, broker: KlogBroker) -> None:
    # librdkafka answers describe_cluster from a Metadata request (kafka-python's test
    # drives the DescribeCluster API itself).
    result = admin.describe_cluster().result(timeout=10)
    assert result.cluster_id == admin.list_topics(timeout=10).cluster_id
    assert result.controller.id == 0
    assert [(n.id, n.host, n.port) for n in result.nodes] == [(0, broker.host, broker.port)]


# -- dynamic configs survive a restart -------------------------------------------------------


@pytest.fixture
def own_broker(klog_broker_factory: Any) -> Iterator[KlogBroker]:
    yield klog_broker_factory()


def test_dynamic_configs_survive_a_restart(own_broker: KlogBroker) -> None:
    bootstrap = own_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert _results(admin.create_topics([NewTopic("kept", 1, 1)])) == {"kept": None}
    resources = [
        ConfigResource("topic", "kept", incremental_configs=[ConfigEntry(
            "max.message.bytes", "2048", incremental_operation=AlterConfigOpType.SET)]),
        ConfigResource("broker", "0", incremental_configs=[ConfigEntry(
            "log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]),
    ]
    assert list(_results(admin.incremental_alter_configs(resources)).values()) == [None, None]
    own_broker.restart()
    _wait_for_topic(bootstrap, "kept")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = _topic_config(admin, "kept")
    assert configs["max.message.bytes"].value == "2048"
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    (error,) = _produce(bootstrap, "kept", [b"y" * 5000])
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
