"""Log compaction in a replicated topic: every replica's cleaner compacts its own copy.

Three brokers, a compacted topic with replication factor 3: after the writes, each broker's
cleaner cleans its replica up to that replica's high watermark (checkpointed in its own
cleaner-offset-checkpoint), and after the leader is killed the new leader, compacted by
its own cleaner, serves one record per key, the latest. Waits are bounded; nothing asserts
speed.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from klog.storage.checkpoints import read_offset_checkpoint
from tests.cluster.conftest import Cluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(240)

SEGMENT_MS = 500


def _checkpoint(c: Cluster, broker_id: int, topic: str) -> int:
    path = c.broker(broker_id).log_dir / "cleaner-offset-checkpoint"
    return read_offset_checkpoint(path).get((topic, 0), -1) if path.exists() else -1


def _read_all(bootstrap: str, topic: str, through: int
              ) -> list[tuple[bytes | None, bytes | None, int]]:
    """Every record of partition 0 up to offset ``through``, once the high watermark is
    past it: a new leader's high watermark catches up with its log end only once the
    remaining followers fetch from it (as in Kafka), so right after a failover it may
    still stand below the last acknowledged record."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
        "enable.auto.commit": False})
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)
        wait_until(lambda: consumer.get_watermark_offsets(tp, timeout=10)[1] > through, 30,
                   f"the high watermark past offset {through}")
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([tp])
        out: list[tuple[bytes | None, bytes | None, int]] = []
        deadline = time.monotonic() + 30
        while (not out or out[-1][2] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.key(), msg.value(), msg.offset()))
        return out
    finally:
        consumer.close()


def test_every_replica_is_compacted_and_a_new_leader_serves_latest_values(cluster: Any
                                                                         ) -> None:
    c: Cluster = cluster(3, overrides={"log.cleaner.backoff.ms": "100",
                                       "min.insync.replicas": "2"})
    c.create_topic("compacted", 1, 3, configs={
        "cleanup.policy": "compact", "segment.bytes": "4096", "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01"})
    c.wait_for_isr("compacted", 0, c.ids)
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers,
                                         "acks": "all", "linger.ms": 5})
    latest: dict[bytes, bytes] = {}
    for rnd in range(30):
        for k in range(40):
            key, value = b"key-%d" % k, b"value-%d-%d" % (k, rnd)
            producer.produce("compacted", value, key, partition=0)
            latest[key] = value
    assert producer.flush(30) == 0
    time.sleep(SEGMENT_MS / 1000 + 0.2)  # then one more record rolls the active segment
    ends: list[int] = []
    producer.produce("compacted", b"end", b"sentinel", partition=0,
                     on_delivery=lambda _err, msg: ends.append(msg.offset()))
    assert producer.flush(30) == 0
    end = ends[0]
    assert end == 30 * 40
    # Each replica's own cleaner reaches the sentinel's segment (below its high watermark).
    wait_until(lambda: all(_checkpoint(c, i, "compacted") >= end for i in c.ids), 90,
               "every replica's cleaner checkpoint to reach the last segment")
    old = c.leader("compacted", 0)
    c.kill(old)
    new = c.wait_for_leader("compacted", 0, exclude={old})
    records = _read_all(c.bootstrap_of([i for i in c.ids if i != old]), "compacted", end)
    keys = [key for key, _value, _offset in records]
    assert len(keys) == len(set(keys)), f"broker {new} serves a key more than once"
    assert {key: value for key, value, _o in records} == {**latest, b"sentinel": b"end"}
