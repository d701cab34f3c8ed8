"""Replication throttles across real broker processes on a real ZooKeeper: a follower
catching up ~6 MB under 1 MB/s leader and follower throttles, configured as
kafka-reassign-partitions.sh writes them (the rates on the brokers, the topic's
leader.replication.throttled.replicas = its replicas, follower... = the catching-up one),
moves data at the limit within 20%; lifting the throttle lets the rest go at full speed.

The rate is measured on the follower's disk (its segment files), from the first bytes it
wrote to the moment it holds the leader's whole log."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

LIMIT = 1_000_000  # bytes/s
DATA = 6_000_000
RECORD = 10_000


def _log_size(c: Cluster, broker_id: int, topic: str, partition: int = 0) -> int:
    d = Path(c.broker(broker_id).log_dir) / f"{topic}-{partition}"
    return sum(p.stat().st_size for p in d.glob("*.log")) if d.is_dir() else 0


def _alter(c: Cluster, changes: dict[tuple[str, str], dict[str, str | None]]) -> None:
    from klog.client.admin import AlterConfigOp, ConfigResource

    async def run(admin: Any) -> None:
        ops = {ConfigResource.of(kind, name): [
            AlterConfigOp(k, v, "set" if v is not None else "delete") for k, v in cfg.items()]
            for (kind, name), cfg in changes.items()}
        result = await admin.alter_configs(ops)
        errors = {r: e for r, e in result.items() if e is not None}
        assert not errors, errors

    c._admin(None, run)


def _produce(c: Cluster, topic: str, total: int, via: int) -> int:
    # Small batches: a fetch returns at least one whole batch, so librdkafka's default 1 MB
    # batches would make the throttle move data in 1 MB steps.
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of([via]),
                                         "acks": "all", "linger.ms": 5, "batch.size": 65536})
    count = total // RECORD
    for _ in range(count):
        producer.produce(topic, value=os.urandom(RECORD), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    return count


def _catch_up(c: Cluster, follower: int, leader: int, topic: str, timeout: float
              ) -> list[tuple[float, int]]:
    """(time, bytes on the follower's disk) samples until it holds the leader's log."""
    target = _log_size(c, leader, topic)
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        size = _log_size(c, follower, topic)
        samples.append((time.monotonic(), size))
        if size >= target:
            return samples
        time.sleep(0.05)
    raise AssertionError(f"broker {follower} did not catch up: {samples[-1][1]} of {target}")


def _rate(samples: list[tuple[float, int]]) -> float:
    """Bytes moved / time taken, from the last sample before any data arrived (so at most
    one sampling interval early) to the sample holding the whole log. SimpleRate lets a
    quota start with a window's worth at once, which is part of the catch-up."""
    first = next(i for i, (_t, s) in enumerate(samples) if s > 0)
    t0 = samples[max(first - 1, 0)][0]
    t1, s1 = samples[-1]
    return s1 / (t1 - t0)


def test_a_throttle_holds_follower_catch_up_within_20_percent(cluster: Any) -> None:
    # 256 KB per partition fetch: the step by which a quota can overshoot (Kafka's as well:
    # the quota is checked before a read, not by its size).
    c: Cluster = cluster(2, overrides={"replica.fetch.max.bytes": "262144"})
    c.create_topic("t", 1, 2)
    c.wait_for_isr("t", 0, [1, 2])
    follower = 2
    c.stop(follower)
    leader = c.wait_for_leader("t", 0, exclude={follower})
    _produce(c, "t", DATA, leader)
    leader_size = _log_size(c, leader, "t")
    assert leader_size >= DATA
    # What `klog reassign execute --throttle` writes (kafka-reassign-partitions.sh's way).
    _alter(c, {
        ("broker", ""): {"leader.replication.throttled.rate": str(LIMIT),
                         "follower.replication.throttled.rate": str(LIMIT)},
        ("topic", "t"): {"leader.replication.throttled.replicas": f"0:{leader},0:{follower}",
                         "follower.replication.throttled.replicas": f"0:{follower}"},
    })
    c.start(follower)
    samples = _catch_up(c, follower, leader, "t", timeout=60)
    rate = _rate(samples)
    elapsed = samples[-1][0] - next(t for t, s in samples if s > 0)
    print(f"throttled catch-up: {leader_size} bytes, {rate / 1e6:.3f} MB/s over "
          f"{elapsed:.2f} s (limit {LIMIT / 1e6:.1f} MB/s)")
    assert 0.8 * LIMIT <= rate <= 1.2 * LIMIT, rate
    c.wait_for_isr("t", 0, [1, 2], timeout=30)

    # Without the throttle the same catch-up is much faster.
    _alter(c, {("broker", ""): {"leader.replication.throttled.rate": None,
                                "follower.replication.throttled.rate": None}})
    c.stop(follower)
    c.wait_for_leader("t", 0, exclude={follower})
    _produce(c, "t", DATA, leader)
    c.start(follower)
    samples = _catch_up(c, follower, leader, "t", timeout=60)
    last_before = max(i for i, (_t, s) in enumerate(samples) if s <= leader_size)
    elapsed = samples[-1][0] - samples[last_before][0]
    print(f"unthrottled catch-up of {DATA} more bytes: within {elapsed:.2f} s")
    assert elapsed < DATA / LIMIT / 2
