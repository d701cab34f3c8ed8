"""Kafka's Java client (kafka-clients: the 4.x release tests/jvm/pom.xml pins, and the 3.x
release of its kafka3 profile) against one klog broker: the producer with every acks
setting, idempotence, every codec, headers and large records, checked by reading back with
librdkafka and with what klog stored; the consumer by subscription and assignment, seeks,
offsetsForTimes, pause/resume, group rebalances with the cooperative-sticky and range
assignors, and static membership."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from klog.protocol.records.batch import CompressionType
from klog.testing import KlogBroker
from tests.interop.conftest import CODECS, stored_batches
from tests.jvm.driver import JavaFailure, Jvm

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
            "group.min.session.timeout.ms": "500"}



@pytest.fixture(scope="module")
def jvm(client_jvm: Jvm) -> Jvm:
    """This module's tests run with Kafka 4.x's client and again with the last 3.x one."""
    return client_jvm

def value(i: int, size: int) -> bytes:
    """The value the Java side writes for record ``i`` (Records.value)."""
    unit = f"value-{i}-".encode()
    length = max(size, len(unit))
    return (unit * (length // len(unit) + 1))[:length]


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(15)


def read_with_librdkafka(bootstrap: str, topic: str, count: int,
                         partitions: int = 1) -> list[Any]:
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.message.max.bytes": 4 << 20})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[Any] = []
        for _ in range(200):
            if len(got) >= count:
                break
            for message in consumer.consume(count - len(got), timeout=0.2):
                assert message.error() is None, message.error()
                got.append(message)
        return got
    finally:
        consumer.close()


def produce_with_librdkafka(bootstrap: str, topic: str, count: int, partition: int = 0,
                            timestamp: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value(i, 20), f"k{i}".encode(), partition=partition,
                         timestamp=(timestamp + i * 1000) if timestamp is not None else 0)
    assert producer.flush(20) == 0


@pytest.mark.parametrize(("acks", "idempotent"), [
    ("0", "false"), ("1", "false"), ("all", "false"), ("all", "true")])
def test_producer_acks_and_idempotence(jvm: Jvm, bootstrap: str, broker: KlogBroker,
                                       topic: str, acks: str, idempotent: str) -> None:
    create(bootstrap, topic)
    count = 300
    result = jvm.call("produce", bootstrap=bootstrap, topic=topic, count=count, headers=True,
                      config={"acks": acks, "enable.idempotence": idempotent,
                              "linger.ms": "5", "batch.size": "4096"})
    offsets = [o for _, o, _ in result["offsets"]]
    # acks=0 learns no offsets (-1); every other setting learns each record's own.
    assert offsets == ([-1] * count if acks == "0" else list(range(count)))
    got = read_with_librdkafka(bootstrap, topic, count)
    assert [m.offset() for m in got] == list(range(count))
    for i, m in enumerate(got):
        assert m.key() == f"k{i}".encode()
        assert m.value() == value(i, 20)
        assert m.headers() == [("index", str(i).encode()), ("client", b"java"), ("empty", b"")]
    batches = stored_batches(broker.log_dir, topic)
    assert len(batches) > 1  # batch.size kept batches small: several requests
    producer_ids = {b.producer_id for b in batches}
    if idempotent == "true":
        assert len(producer_ids) == 1 and min(producer_ids) >= 0
        assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]
    else:
        assert producer_ids == {-1}


@pytest.mark.parametrize("codec", CODECS)
def test_producer_codecs_read_back_by_both_clients(jvm: Jvm, bootstrap: str,
                                                   broker: KlogBroker, topic: str,
                                                   codec: str) -> None:
    create(bootstrap, topic)
    count = 500
    jvm.call("produce", bootstrap=bootstrap, topic=topic, count=count, value_size=300,
             config={"compression.type": codec, "linger.ms": "20"})
    batches = stored_batches(broker.log_dir, topic)
    assert {b.compression for b in batches} == {CompressionType[codec.upper()]}
    got = read_with_librdkafka(bootstrap, topic, count)
    assert [m.value() for m in got] == [value(i, 300) for i in range(count)]
    back = jvm.call("consume", bootstrap=bootstrap, topic=topic, mode="assign", expect=count)
    records = back["records"]
    assert [r["offset"] for r in records] == list(range(count))
    assert all(r["value_crc"] == zlib.crc32(value(r["offset"], 300)) for r in records)


def test_large_records_and_one_too_large(jvm: Jvm, bootstrap: str, broker: KlogBroker,
                                         topic: str) -> None:
    create(bootstrap, topic)
    size = 900_000  # below message.max.bytes (1 MB) with its batch overhead
    result = jvm.call("produce", bootstrap=bootstrap, topic=topic, count=3, value_size=size,
                      config={"compression.type": "none"})
    assert [o for _, o, _ in result["offsets"]] == [0, 1, 2]
    back = jvm.call("consume", bootstrap=bootstrap, topic=topic, mode="assign", expect=3)
    assert [(r["value_size"], r["value_crc"]) for r in back["records"]] == [
        (size, zlib.crc32(value(i, size))) for i in range(3)]
    refused = jvm.call("produce_refused", bootstrap=bootstrap, topic=topic,
                       value_size=2_000_000, config={"max.request.size": "4000000",
                                                     "retries": "0"})
    assert refused["exception"] == "org.apache.kafka.common.errors.RecordTooLargeException"


def test_consumer_subscribe_commits_and_assign(jvm: Jvm, bootstrap: str, topic: str) -> None:
    create(bootstrap, topic, partitions=3)
    for p in range(3):
        produce_with_librdkafka(bootstrap, topic, 20, partition=p)
    group = f"g-{topic}"
    got = jvm.call("consume", bootstrap=bootstrap, topic=topic, expect=60,
                   config={"group.id": group})
    seen = sorted((r["partition"], r["offset"]) for r in got["records"])
    assert seen == [(p, o) for p in range(3) for o in range(20)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    [future] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in future.result(15).topic_partitions}
    assert committed == {0: 20, 1: 20, 2: 20}
    only = jvm.call("consume", bootstrap=bootstrap, topic=topic, mode="assign",
                    partitions=[1], expect=20)
    assert {r["partition"] for r in only["records"]} == {1}
    assert [r["key"] for r in only["records"]] == [f"k{i}" for i in range(20)]


def test_consumer_seeks_and_offsets_for_times(jvm: Jvm, bootstrap: str, topic: str) -> None:
    create(bootstrap, topic)
    base = 1_700_000_000_000
    produce_with_librdkafka(bootstrap, topic, 10, timestamp=base)  # one second apart
    got = jvm.call("consumer_seeks", bootstrap=bootstrap, topic=topic, seek_to=6,
                   times=[base - 1, base + 3500, base + 9000, base + 60_000])
    assert got["beginning"] == 0 and got["end"] == 10
    assert got["position_after_seek_to_beginning"] == 0
    assert got["first_after_seek_to_beginning"] == 0
    assert got["first_after_seek"] == 6
    assert got["position_after_seek_to_end"] == 10
    assert got["offsets_for_times"] == [[0, base], [4, base + 4000], [9, base + 9000], None]


def test_consumer_pause_and_resume(jvm: Jvm, bootstrap: str, topic: str) -> None:
    create(bootstrap, topic, partitions=2)
    produce_with_librdkafka(bootstrap, topic, 15, partition=0)
    produce_with_librdkafka(bootstrap, topic, 25, partition=1)
    got = jvm.call("consumer_pause_resume", bootstrap=bootstrap, topic=topic,
                   partitions=[0, 1], expect=40, pause_ms=1500)
    assert got["paused"] == [f"{topic}-0"]
    assert got["while_paused"] == {"1": 25}
    assert got["paused_after_resume"] == 0
    assert got["after_resume"] == {"0": 15}


@pytest.mark.parametrize("assignor", [
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
    "org.apache.kafka.clients.consumer.RangeAssignor"])
def test_group_rebalance_with_assignor(jvm: Jvm, bootstrap: str, topic: str,
                                       assignor: str) -> None:
    create(bootstrap, topic, partitions=6)
    for p in range(6):
        produce_with_librdkafka(bootstrap, topic, 30, partition=p)
    got = jvm.call("consumer_group_rebalance", bootstrap=bootstrap, topic=topic,
                   partition_count=6, expect=180, assignor=assignor,
                   config={"group.id": f"g-{topic}"})
    first, second = got["assignments"]
    assert sorted(first + second) == list(range(6))
    assert len(first) == len(second) == 3
    assert got["distinct_read"] == 180
    calls_first = got["listener_calls"][0]
    assert calls_first[0] == ["assigned", list(range(6))]
    if "Cooperative" in assignor:
        # Incremental: the first member gives up only what moves, never all six.
        assert ["revoked", list(range(6))] not in calls_first
        revoked = [c[1] for c in calls_first if c[0] == "revoked"]
        assert revoked == [second]
    else:
        # Eager: every member gives up everything, then gets its share.
        assert ["revoked", list(range(6))] in calls_first
        assert calls_first[-1] == ["assigned", first]
    assert all(c[0] != "lost" for member in got["listener_calls"] for c in member)


def test_static_membership(jvm: Jvm, bootstrap: str, topic: str) -> None:
    create(bootstrap, topic, partitions=4)
    group = f"g-{topic}"
    got = jvm.call("consumer_static_membership", bootstrap=bootstrap, topic=topic, group=group,
                   partition_count=4)
    assert [m["group_instance_id"] for m in got["members_before"]] == ["static-a", "static-b"]
    # The returning static member gets its old partitions back without a rebalance: the
    # generation stays and the other member is not disturbed; it has a new member id.
    assert got["generation_after"] == got["generation_before"]
    assert got["second_generation_after"] == got["generation_before"]
    assert got["rejoined_assignment"] == got["first_assignment"]
    assert got["rejoined_member_id"] != got["first_member_id"]
    after = {m["group_instance_id"]: m for m in got["members_after"]}
    assert after["static-a"]["member_id"] == got["rejoined_member_id"]
    assert after["static-a"]["partitions"] == got["first_assignment"]


def test_the_new_consumer_group_protocol_is_refused_clearly(jvm: Jvm, bootstrap: str,
                                                             topic: str) -> None:
    # KIP-848's protocol (group.protocol=consumer) is not served, as by Kafka 3.x in
    # ZooKeeper mode: the Java consumer stops with UnsupportedVersionException (Kafka 4's
    # says to use group.protocol=classic) instead of hanging.
    create(bootstrap, topic)
    with pytest.raises(JavaFailure) as failure:
        jvm.call("consume", bootstrap=bootstrap, topic=topic, expect=1, timeout_ms=10_000,
                 config={"group.id": f"g-{topic}", "group.protocol": "consumer"})
    assert "UnsupportedVersionException" in str(failure.value).splitlines()[0]
