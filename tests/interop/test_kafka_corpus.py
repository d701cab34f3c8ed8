"""A broker started on a copy of a log dir that Apache Kafka 2.x wrote (the shared corpus,
see ../shared/kafka-corpus/README.md) serves its topics to real clients: first_topic's
partitions hold 11, 12 and 18 records, new_topic 2, __consumer_offsets its 50 partitions;
new records follow the old ones, and the time index Kafka did not leave behind is rebuilt
for timestamp lookups."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from klog.testing import KlogBroker
from tests.interop.conftest import KCAT, wait_until_serving

pytestmark = [pytest.mark.timeout(90), pytest.mark.corpus]

COUNTS = {("first_topic", 0): 11, ("first_topic", 1): 12, ("first_topic", 2): 18,
          ("new_topic", 0): 2, ("__consumer_offsets", 12): 470, ("__consumer_offsets", 17): 3,
          ("__consumer_offsets", 18): 499, ("__consumer_offsets", 32): 50,
          ("__consumer_offsets", 33): 3}
CLUSTER_ID = "lRaQCIBoRh2xRKLuP9CAQg"


def _writable_copy(source: Path, target: Path) -> Path:
    """Copy the (read-only) corpus; the copy gets owner write permission throughout."""
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    for root, dirs, files in os.walk(target):
        for name in dirs + files:
            path = os.path.join(root, name)
            os.chmod(path, os.stat(path).st_mode | 0o700 if name in dirs else 0o600)
    os.chmod(target, 0o700)
    return target


@pytest.fixture(scope="module")
def corpus_broker(kafka_corpus: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    base = tmp_path_factory.mktemp("corpus")
    log_dir = _writable_copy(kafka_corpus, base / "kafka-logs")
    running = KlogBroker(base / "data", overrides={"log.dirs": str(log_dir)})
    running.start()
    try:
        wait_until_serving(running, ["first_topic", "new_topic"])
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def bootstrap(corpus_broker: KlogBroker) -> str:
    return corpus_broker.bootstrap_servers


def _confluent_read(bootstrap: str, topic: str, partition: int, count: int,
                    offset: int = OFFSET_BEGINNING) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        got: list[Message] = []
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append(msg)
        return got
    finally:
        consumer.close()


def test_metadata_lists_the_corpus_topics(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        md = consumer.list_topics(timeout=10)
    finally:
        consumer.close()
    assert md.cluster_id == CLUSTER_ID  # kept from the log dir's meta.properties
    partitions = {name: sorted(t.partitions) for name, t in md.topics.items()}
    assert partitions["first_topic"] == [0, 1, 2]
    assert partitions["new_topic"] == [0]
    assert partitions["__consumer_offsets"] == list(range(50))
    for name in ("first_topic", "new_topic", "__consumer_offsets"):
        assert all(p.leader == 0 and p.error is None for p in md.topics[name].partitions.values())


def test_confluent_reads_every_record(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        for (topic, partition), count in COUNTS.items():
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=10)
            assert (low, high) == (0, count), (topic, partition)
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in COUNTS])
        got: dict[tuple[str, int], list[Message]] = {tp: [] for tp in COUNTS}
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < sum(COUNTS.values()) \
                and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                got[(msg.topic(), msg.partition())].append(msg)
    finally:
        consumer.close()
    for tp, count in COUNTS.items():
        assert [m.offset() for m in got[tp]] == list(range(count)), tp
        # Records Kafka 2.x wrote in April 2020, with CreateTime timestamps
        assert all(m.timestamp()[0] == 1 and 1_585_000_000_000 < m.timestamp()[1]
                   < 1_590_000_000_000 for m in got[tp])


def test_kafka_python_and_aiokafka_read_first_topic(bootstrap: str) -> None:
    tps = [KpTopicPartition("first_topic", p) for p in range(3)]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        per_partition: dict[int, list[int]] = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 15
        while sum(map(len, per_partition.values())) < 41 and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                per_partition[tp.partition].extend(r.offset for r in records)
    finally:
        consumer.close()
    assert per_partition == {0: list(range(11)), 1: list(range(12)), 2: list(range(18))}

    async def aio() -> dict[int, list[Any]]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
        await c.start()
        try:
            parts = [AioTopicPartition("first_topic", p) for p in range(3)]
            c.assign(parts)
            await c.seek_to_beginning(*parts)
            out: dict[int, list[Any]] = {0: [], 1: [], 2: []}
            deadline = time.monotonic() + 15
            while sum(map(len, out.values())) < 41 and time.monotonic() < deadline:
                for tp, records in (await c.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(records)
            return out
        finally:
            await c.stop()

    got = asyncio.run(asyncio.wait_for(aio(), 40))
    assert {p: [r.offset for r in rs] for p, rs in got.items()} == per_partition
    confluent = _confluent_read(bootstrap, "first_topic", 2, 18)
    assert [(r.key, r.value) for r in got[2]] == [(m.key(), m.value()) for m in confluent]


def test_kcat_reads_the_corpus(bootstrap: str) -> None:
    result = subprocess.run([KCAT, "-b", bootstrap, "-m", "10", "-C", "-t", "first_topic",
                             "-o", "beginning", "-e", "-J"],
                            capture_output=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    got = [json.loads(line) for line in result.stdout.decode().splitlines()]
    counts = {p: sum(1 for m in got if m["partition"] == p) for p in range(3)}
    assert counts == {0: 11, 1: 12, 2: 18}


def test_timestamp_lookup_uses_the_rebuilt_time_index(bootstrap: str) -> None:
    records = _confluent_read(bootstrap, "first_topic", 2, 18)
    stamps = [m.timestamp()[1] for m in records]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        for target in (stamps[0] - 1, stamps[5], stamps[5] + 1, stamps[-1]):
            expected = next(i for i, ts in enumerate(stamps) if ts >= target)
            [tp] = consumer.offsets_for_times([TopicPartition("first_topic", 2, target)],
                                              timeout=10)
            assert tp.offset == expected, target
        [tp] = consumer.offsets_for_times([TopicPartition("first_topic", 2, stamps[-1] + 1)],
                                          timeout=10)
        assert tp.offset == -1
    finally:
        consumer.close()


def test_new_records_follow_the_old_ones_across_a_restart(corpus_broker: KlogBroker) -> None:
    bootstrap = corpus_broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap})
    offsets: list[int] = []
    for i in range(5):
        producer.produce("first_topic", value=b"klog-%d" % i, partition=0,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert producer.flush(20) == 0
    del producer
    assert offsets == list(range(11, 16))
    before = [(m.offset(), m.key(), m.value()) for m in _confluent_read(bootstrap, "first_topic",
                                                                        0, 16)]
    assert [v for _, _, v in before[11:]] == [b"klog-%d" % i for i in range(5)]
    corpus_broker.restart()
    wait_until_serving(corpus_broker, ["first_topic", "new_topic"])
    after = [(m.offset(), m.key(), m.value()) for m in _confluent_read(bootstrap, "first_topic",
                                                                       0, 16)]
    assert after == before
    assert len(_confluent_read(bootstrap, "first_topic", 2, 18)) == 18
