"""Log compaction against a real klog broker, with real clients (issue 20).

confluent-kafka and kafka-python write keyed data and tombstones to a compacted topic;
once the broker's cleaner has run, a consumer reading from the beginning sees one record
per key, the latest written. ``__consumer_offsets`` stays small under 20,000 commits and
still gives the last committed offset after a restart. A record without a key is refused
on a compacted topic with INVALID_RECORD (a raw produce and librdkafka). A transactional
producer committing and aborting keyed values leaves, once cleaned, only the latest
committed value of each key for read_committed and read_uncommitted consumers alike, and
``__transaction_state`` stays small.

Waits for the cleaner are bounded; nothing asserts how fast it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klog.protocol.errors import ErrorCode
from klog.storage.checkpoints import read_offset_checkpoint
from klog.testing import KlogBroker
from tests.daemon.wire import WireClient, batch
from tests.interop.conftest import wait_until_serving

pytestmark = pytest.mark.timeout(180)

CLEANER_WAIT = 90.0  # seconds: a bound, not a speed requirement
SEGMENT_MS = 500


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"log.cleaner.backoff.ms": "100", "num.partitions": "1"}


def create_compacted(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"cleanup.policy": "compact", "segment.bytes": "2048",
                "segment.ms": str(SEGMENT_MS), "min.cleanable.dirty.ratio": "0.01",
                **configs}
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=settings)])
    futures[topic].result(timeout=30)


def cleaner_checkpoint(log_dir: Path, topic: str) -> int:
    path = log_dir / "cleaner-offset-checkpoint"
    return read_offset_checkpoint(path).get((topic, 0), -1) if path.exists() else -1


def wait_for(condition: Callable[[], bool], what: str, timeout: float = CLEANER_WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, offset) of every record from the beginning to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time()}",
                         "enable.auto.commit": False})
    try:
        tp = TopicPartition(topic, 0, OFFSET_BEGINNING)
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([tp])
        out: list[tuple[bytes | None, bytes | None, int]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][2] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.key(), msg.value(), msg.offset()))
        return out
    finally:
        consumer.close()


def read_all_kafka_python(bootstrap: str, topic: str) -> list[tuple[Any, Any, int]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000, auto_offset_reset="earliest")
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return [(m.key, m.value, m.offset) for m in consumer]
    finally:
        consumer.close()


def test_consumers_see_only_the_latest_value_of_each_key(broker: KlogBroker, topic: str
                                                         ) -> None:
    from kafka import KafkaProducer

    bootstrap = broker.bootstrap_servers
    create_compacted(bootstrap, topic, **{"delete.retention.ms": "3600000"})
    latest: dict[bytes, bytes | None] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for rnd in range(20):
        for k in range(50):
            key, value = f"key-{k}".encode(), f"value-{k}-{rnd}".encode()
            producer.produce(topic, value, key)
            latest[key] = value
    assert producer.flush(30) == 0
    # kafka-python: tombstones for keys 0-9, new values for keys 40-49.
    kp = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for k in range(10):
        kp.send(topic, key=f"key-{k}".encode(), value=None)
        latest[f"key-{k}".encode()] = None
    for k in range(40, 50):
        kp.send(topic, key=f"key-{k}".encode(), value=f"last-{k}".encode())
        latest[f"key-{k}".encode()] = f"last-{k}".encode()
    kp.flush(30)
    kp.close()
    # The active segment is never cleaned: after segment.ms, one more record rolls it.
    # (The cleaner may well have cleaned the segments filled so far already.)
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    sentinel: list[int] = []
    producer.produce(topic, b"end", b"sentinel",
                     on_delivery=lambda err, msg: sentinel.append(msg.offset()))
    assert producer.flush(30) == 0
    end = sentinel[0]
    assert end == 20 * 50 + 20  # every record was appended
    wait_for(lambda: cleaner_checkpoint(broker.log_dir, topic) >= end, "the cleaner")

    for records in (read_all(bootstrap, topic), read_all_kafka_python(bootstrap, topic)):
        keys = [key for key, _value, _offset in records]
        assert len(keys) == len(set(keys)), "a key appears more than once"
        seen = {key: value for key, value, _offset in records}
        assert seen.pop(b"sentinel") == b"end"
        for key, value in latest.items():
            if value is None:
                assert seen.get(key) is None  # the tombstone, or nothing
            else:
                assert seen[key] == value
        # Offsets are the original ones: increasing, with the gaps compaction left.
        offsets = [offset for _key, _value, offset in records]
        assert offsets == sorted(offsets) and offsets[-1] == end
    assert "Log cleaner thread 0 cleaned log " + topic + "-0" in broker.log_file.read_text()


def test_a_record_without_a_key_is_refused_raw(broker: KlogBroker, topic: str) -> None:
    create_compacted(broker.bootstrap_servers, topic)
    with WireClient((broker.host, broker.port)) as client:
        response = client.produce(topic, 0, batch(3, key=None))
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.INVALID_RECORD == 87
        assert "compacted topic cannot accept a record without a key" in part.error_message
        keyed = client.produce(topic, 0, batch(3, key=b"k"))
        assert keyed.responses[0].partition_responses[0].error_code == 0


def test_a_record_without_a_key_is_refused_confluent(broker: KlogBroker, topic: str) -> None:
    create_compacted(broker.bootstrap_servers, topic)
    outcomes: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "retries": 0})
    # One at a time: a batch holding a keyless record is refused whole, as Kafka does.
    producer.produce(topic, b"no key", on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(30)
    producer.produce(topic, b"keyed", b"k", on_delivery=lambda err, _msg: outcomes.append(err))
    producer.flush(30)
    assert outcomes[0] is not None and outcomes[0].code() == KafkaError.INVALID_RECORD
    assert outcomes[1] is None


def committed_offsets(bootstrap: str, group: str, partitions: int) -> list[int]:
    """``group``'s committed offsets of partitions 0..partitions-1 of topic ``t``."""
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = check.committed([TopicPartition("t", p) for p in range(partitions)],
                                    timeout=30)
    finally:
        check.close()
    return [tp.offset for tp in committed]


def test_consumer_offsets_stays_small_under_many_commits(tmp_path: Path) -> None:
    running = KlogBroker(tmp_path / "data", overrides={
        "log.cleaner.backoff.ms": "100", "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": "65536"})
    running.start()
    try:
        wait_until_serving(running)
        bootstrap = running.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 4, 1)])["t"].result(timeout=30)
        commits = 20_000
        outcomes: list[KafkaError | None] = []
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "many-commits",
                             "enable.auto.commit": False,
                             "on_commit": lambda err, _partitions: outcomes.append(err)})
        # The first commit is synchronous: librdkafka parks the commits made before it
        # knows the group's coordinator and sends them again only when its group state
        # machine next runs in state "up" (rdkafka_cgrp.c moves its wait-for-coordinator
        # queue to the tail of its ops queue), while the commits it serves meanwhile go out
        # at once. So asynchronous commits made before the coordinator is known can reach
        # the broker after later ones: under load, commits 1..15744 of 20,000 arrived
        # after 15745..20000 (each answered NONE) and the broker, as Kafka's would, kept
        # the last it received.
        consumer.commit(offsets=[TopicPartition("t", 1, 1)], asynchronous=False)
        for i in range(2, commits):
            consumer.commit(offsets=[TopicPartition("t", i % 4, i)], asynchronous=True)
        consumer.commit(offsets=[TopicPartition("t", 0, commits)], asynchronous=False)
        deadline = time.monotonic() + 30
        while len(outcomes) < commits - 2 and time.monotonic() < deadline:
            consumer.poll(0.1)  # serves the asynchronous commits' callbacks
        consumer.close()
        assert len(outcomes) >= commits - 2 and all(err is None for err in outcomes), \
            {str(err) for err in outcomes if err is not None}
        expected = [commits, 19_997, 19_998, 19_999]
        assert committed_offsets(bootstrap, "many-commits", 4) == expected
        offsets_dir = running.log_dir / "__consumer_offsets-0"

        def size() -> int:
            return sum(p.stat().st_size for p in offsets_dir.glob("*.log"))

        # Uncompacted, 20,000 commits take ~2 MB here; compacted, 4 keys and the
        # active segment (at most 64 KiB) remain.
        wait_for(lambda: size() < 200_000, "__consumer_offsets to be compacted")
        running.stop()
        running.start()
        wait_until_serving(running)
        assert committed_offsets(bootstrap, "many-commits", 4) == expected
    finally:
        running.stop()


def read_isolated(bootstrap: str, topic: str, isolation: str, end: int
                  ) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, offset) of every record a consumer with ``isolation`` reads from the
    beginning until it reaches ``end`` (the sentinel's offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time()}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[tuple[bytes | None, bytes | None, int]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][2] < end) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.key(), msg.value(), msg.offset()))
        return out
    finally:
        consumer.close()


def test_transactions_on_a_compacted_topic(tmp_path: Path) -> None:
    """A transactional producer commits and aborts keyed values (the last transaction
    aborted, so aborted values are the newest of their keys): once cleaned, consumers of
    either isolation level see only the latest committed value of each key, and
    ``__transaction_state`` (compacted) stays small after many transactions."""
    running = KlogBroker(tmp_path / "data", overrides={
        "log.cleaner.backoff.ms": "100", "transaction.state.log.num.partitions": "1",
        "transaction.state.log.segment.bytes": "16384", "offsets.topic.num.partitions": "1"})
    running.start()
    try:
        wait_until_serving(running)
        bootstrap = running.bootstrap_servers
        topic = "txn-compacted"
        create_compacted(bootstrap, topic)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tc-1",
                             "linger.ms": 5})
        producer.init_transactions(30)
        committed: dict[bytes, bytes] = {}
        aborted_values: set[bytes] = set()
        transactions = 300
        for n in range(transactions):
            abort = n % 3 == 1 or n == transactions - 1
            producer.begin_transaction()
            written = {}
            for k in range(n % 4, 10, 3):
                key, value = f"key-{k}".encode(), f"value-{k}-{n}".encode()
                producer.produce(topic, value, key)
                written[key] = value
            if abort:
                # Sent first: librdkafka drops what it has not sent yet on abort.
                assert producer.flush(30) == 0
                producer.abort_transaction(30)
                aborted_values.update(written.values())
            else:
                producer.commit_transaction(30)
                committed.update(written)
        # The active segment is never cleaned: after segment.ms, one more record rolls it.
        time.sleep(SEGMENT_MS / 1000 + 0.2)
        plain = Producer({"bootstrap.servers": bootstrap})
        sentinel: list[int] = []
        plain.produce(topic, b"end", b"sentinel",
                      on_delivery=lambda err, msg: sentinel.append(msg.offset()))
        assert plain.flush(30) == 0
        end = sentinel[0]
        wait_for(lambda: cleaner_checkpoint(running.log_dir, topic) >= end, "the cleaner")

        for isolation in ("read_committed", "read_uncommitted"):
            records = read_isolated(bootstrap, topic, isolation, end)
            assert records and records[-1][2] == end, isolation
            keys = [key for key, _value, _offset in records]
            assert len(keys) == len(set(keys)), f"{isolation}: a key appears more than once"
            seen = {key: value for key, value, _offset in records}
            assert seen.pop(b"sentinel") == b"end"
            assert seen == committed, isolation
            assert not {v for _k, v, _o in records} & aborted_values, isolation

        # Uncompacted, the 300 transactions take ~105 KB of __transaction_state here
        # (measured with the cleaner off); compacted, one transactional.id's latest state,
        # the active segment (at most 16 KiB) and at most one closed segment not yet
        # cleaned remain.
        state_dir = running.log_dir / "__transaction_state-0"

        def size() -> int:
            return sum(p.stat().st_size for p in state_dir.glob("*.log"))

        wait_for(lambda: size() < 36_000, "__transaction_state to be compacted")
        producer.flush(10)
    finally:
        running.stop()
