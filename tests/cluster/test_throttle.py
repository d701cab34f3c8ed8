"""Replication throttles across real broker processes on a real ZooKeeper: a follower
catching up ~6 MB under 1 MB/s leader and follower throttles, configured as
kafka-reassign-partitions.sh writes them (the rates on the brokers, the topic's
leader.replication.throttled.replicas = its replicas, follower... = the catching-up one),
moves data at the limit within 20%; lifting the throttle lets the rest go at full speed.
`klog reassign execute --throttle` adding a replica holds its rate the same way while an
acks=all producer and a consumer run, and `klog reassign verify` removes the throttles.

The rate is measured on the follower's disk (its segment files), from the first bytes it
wrote to the moment it holds the leader's whole log."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, wait_until

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


def test_klog_reassign_with_a_throttle_holds_its_rate_while_traffic_runs(cluster: Any,
                                                                       tmp_path: Path) -> None:
    """`klog reassign execute --throttle` adds a replica to a 6 MB partition at 1 MB/s
    (within 20%) while an acks=all producer and a consumer run on another topic; `verify`
    then removes the throttles, and the traffic lost and duplicated nothing."""
    import json
    import subprocess
    import sys

    from klog.client.admin import ConfigResource, NewTopic
    from tests.cluster.test_reassignment import Traffic

    c: Cluster = cluster(3, overrides={"replica.fetch.max.bytes": "262144"})

    async def create(admin: Any) -> None:
        result = await admin.create_topics([
            NewTopic("big", replica_assignment={0: [1]}),
            NewTopic("t", replica_assignment={0: [1, 2, 3]},
                     configs={"min.insync.replicas": "2"})])
        assert all(e is None for e in result.values()), result

    c._admin(None, create)
    c.wait_for_isr("t", 0, [1, 2, 3], timeout=30)
    _produce(c, "big", DATA, 1)
    leader_size = _log_size(c, 1, "big")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "big", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}))

    def klog(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "klog", "reassign", *args,
                               "--bootstrap-server", c.bootstrap_servers,
                               "--reassignment-json-file", str(plan)],
                              capture_output=True, text=True, timeout=60)

    traffic = Traffic(c)
    try:
        time.sleep(1.0)
        started = klog("execute", "--throttle", str(LIMIT))
        assert started.returncode == 0, started.stderr
        assert "Successfully started partition reassignment for big-0" in started.stdout
        samples = _catch_up(c, 2, 1, "big", timeout=60)
        rate = _rate(samples)
        print(f"throttled reassignment: {leader_size} bytes at {rate / 1e6:.3f} MB/s "
              f"(limit {LIMIT / 1e6:.1f} MB/s) with traffic running")
        assert 0.8 * LIMIT <= rate <= 1.2 * LIMIT, rate

        def verified() -> str | None:
            out = klog("verify")
            return out.stdout if "is completed" in out.stdout else None

        text = wait_until(verified, 60, "klog reassign verify to report big-0 completed")
        assert "Reassignment of partition big-0 is completed." in text
        traffic.finish()
    finally:
        traffic.stop_producing.set()
        traffic.stop_consuming.set()
    assert not traffic.failed, traffic.failed[:5]
    assert len(set(traffic.seen)) == len(traffic.seen) == traffic.sent == len(traffic.acked)

    async def throttles(admin: Any) -> dict[str, str]:
        resources = [ConfigResource.of("broker", str(i)) for i in c.ids] + \
            [ConfigResource.of("topic", "big")]
        described = await admin.describe_configs(resources)
        return {f"{r.name}/{e.name}": e.value for r, entries in described.items()
                for e in entries if "throttled" in e.name and not e.is_default}

    assert c._admin(None, throttles) == {}
