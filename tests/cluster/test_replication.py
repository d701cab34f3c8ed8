"""Replication across real broker processes on a real ZooKeeper: acks=all with an
idempotent producer survives kill -9 of partition leaders with no acknowledged message lost
or duplicated and identical replicas; a follower with a divergent tail truncates by leader
epoch when it comes back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")


def _log_bytes(c: Cluster, broker_id: int, topic: str, partition: int = 0) -> bytes:
    """The partition's segments on one broker, concatenated in offset order."""
    d = Path(c.broker(broker_id).log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def _consume_all(bootstrap: str, topic: str, expected_end: int | None = None,
                 timeout: float = 30.0) -> list[bytes]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        end = high if expected_end is None else expected_end
        consumer.assign([tp])
        values: list[bytes] = []
        offsets: list[int] = []
        deadline = time.monotonic() + timeout
        while (not offsets or offsets[-1] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            offsets.append(msg.offset())
            values.append(msg.value())
        assert offsets == list(range(len(offsets))), "offsets are not dense from 0"
        assert not offsets or offsets[-1] == end - 1, (offsets[-1:], end)
        return values
    finally:
        consumer.close()


def _wait_for_full_isr(c: Cluster, topic: str) -> None:
    try:
        c.wait_for_isr(topic, 0, c.ids, timeout=40)
    except BaseException:
        for i in c.ids:
            print(f"--- broker {i} ---\n{c.broker(i).log_tail(60)}")
        raise


def _wait_replicas_identical(c: Cluster, topic: str, ids: list[int]) -> None:
    def same() -> bool:
        logs = [_log_bytes(c, i, topic) for i in ids]
        return all(x == logs[0] for x in logs) and bool(logs[0])

    wait_until(same, 30, f"identical logs of {topic}-0 on brokers {ids}")


def test_acks_all_idempotent_producer_survives_leader_kills(cluster: Any) -> None:
    c: Cluster = cluster(3, overrides={"min.insync.replicas": "2"})
    c.create_topic("t", 1, 3)
    c.wait_for_isr("t", 0, c.ids)
    acked: list[bytes] = []
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            failed.append(str(err))

    producer = confluent_kafka.Producer({
        "bootstrap.servers": c.bootstrap_servers, "acks": "all",
        "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000,
        "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
    })
    sent = 0

    def produce_for(seconds: float) -> None:
        nonlocal sent
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(50):
                producer.produce("t", value=b"m-%07d" % sent, partition=0,
                                 on_delivery=delivered)
                sent += 1
            producer.poll(0.02)

    produce_for(1.5)
    for _round in range(2):
        leader = c.leader("t", 0)
        c.kill(leader)
        produce_for(1.0)  # the producer keeps going through the election
        c.wait_for_leader("t", 0, exclude={leader})
        produce_for(1.5)
        c.start(leader)
        _wait_for_full_isr(c, "t")
        produce_for(1.0)
    assert producer.flush(60) == 0
    assert not failed, failed[:5]
    assert len(acked) == sent > 1000
    values = _consume_all(c.bootstrap_servers, "t")
    # Every acknowledged message exactly once, in the order produced.
    assert values == sorted(values)
    assert len(values) == len(set(values))
    assert set(acked) <= set(values)
    assert len(values) == sent  # idempotence: retries brought no duplicates
    print(f"produced {sent}, acknowledged {len(acked)}, consumed {len(values)}")
    _wait_replicas_identical(c, "t", c.ids)


def test_follower_with_a_divergent_tail_truncates_on_return(cluster: Any) -> None:
    c: Cluster = cluster(3, overrides={"min.insync.replicas": "1",
                                       "unclean.leader.election.enable": "false"})
    c.create_topic("d", 1, 3)
    c.wait_for_isr("d", 0, c.ids)
    all_acks = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers,
                                         "acks": "all", "linger.ms": 0})
    for i in range(10):
        all_acks.produce("d", value=b"common-%d" % i, partition=0)
    assert all_acks.flush(30) == 0
    old = c.leader("d", 0)
    followers = [i for i in c.ids if i != old]
    _wait_replicas_identical(c, "d", c.ids)
    # The followers stop fetching; the leader alone takes acks=1 writes, then dies.
    for f in followers:
        c.pause(f)
    # Fetches already waiting on the leader are answered (empty) into the paused
    # followers' sockets within replica.fetch.wait.max.ms; none are sent after that.
    time.sleep(0.8)
    try:
        one_ack = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of([old]),
                                            "acks": "1", "linger.ms": 0})
        for i in range(5):
            one_ack.produce("d", value=b"lost-%d" % i, partition=0)
        assert one_ack.flush(10) == 0
        c.kill(old)
    finally:
        for f in followers:
            c.resume(f)
    new = c.wait_for_leader("d", 0, exclude={old})
    assert new in followers
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of(followers),
                                         "acks": "all", "linger.ms": 0})
    for i in range(3):
        producer.produce("d", value=b"new-%d" % i, partition=0)
    assert producer.flush(30) == 0
    # The old leader returns with offsets 10-14 from its lost epoch: it must truncate them
    # (OffsetForLeaderEpoch) and take the new leader's 10-12 instead.
    c.start(old)
    _wait_for_full_isr(c, "d")
    _wait_replicas_identical(c, "d", c.ids)
    assert "truncated d-0 to offset 10" in c.broker(old).log_tail(1000)
    values = _consume_all(c.bootstrap_servers, "d")
    assert values == [b"common-%d" % i for i in range(10)] + [b"new-%d" % i for i in range(3)]
