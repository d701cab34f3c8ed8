"""Reassignment benchmark: unthrottled partition reassignment vs plain follower catch-up,
3 klog brokers on a real ZooKeeper (loopback, one machine), same run, same bytes, same
pair of brokers (1 -> 2).

- plain: topic ``plain`` on replicas [1, 2]; broker 2 is stopped, N MB of 1 KiB records
  are produced to broker 1 (acks=1), broker 2 is started again and catches up as an
  ordinary follower.
- reassign: topic ``moved`` on replica [1] gets the same N MB, then an
  AlterPartitionReassignments to [1, 2] (unthrottled) makes broker 2 a new replica that
  copies it all.

Both copy rates are measured the same way, from broker 2's log dir for the partition:
bytes / (time the last byte landed - time the first byte landed), polling every 5 ms.
Figure: the reassignment's rate as a share of the plain follower's. Target: >= 70%.
Also reported: the reassignment end to end (request -> ListPartitionReassignments empty).

Needs java and Debian's ``zookeeper`` package (``make test`` installs them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_cluster import RECORD_SIZE, Cluster
from benchmarks.common import WORK, Result, report
from klog.cluster_runner import ZooKeeperServer, zookeeper_unavailable_reason


def _admin(cluster: Cluster, fn: Any) -> Any:
    from klog.client.admin import AdminClient

    async def run() -> Any:
        async with AdminClient(cluster.bootstrap_of_live()) as admin:
            return await fn(admin)

    return asyncio.run(run())


class ReassignCluster(Cluster):
    def bootstrap_of_live(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers.values()
                        if b.process is not None and b.process.poll() is None)

    def log_bytes(self, broker_id: int, topic: str) -> int:
        d = Path(self.brokers[broker_id].log_dir) / f"{topic}-0"
        try:
            return sum(p.stat().st_size for p in d.glob("*.log"))
        except FileNotFoundError:  # a segment rolled or the dir is not there yet
            return 0


def _create(cluster: ReassignCluster, topic: str, replicas: list[int]) -> None:
    from klog.client.admin import NewTopic

    async def create(admin: Any) -> None:
        result = await admin.create_topics([NewTopic(
            topic, replica_assignment={0: replicas}, configs={"min.insync.replicas": "1"})])
        if result[topic] is not None:
            raise SystemExit(f"creating {topic}: {result[topic]}")

    _admin(cluster, create)
    cluster.wait(lambda: cluster.state(topic).leader >= 0, 30, f"{topic}'s leader")


def _produce(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 50,
                         "batch.size": 1 << 20, "enable.idempotence": False})
    value = os.urandom(RECORD_SIZE)
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for _ in range(total // RECORD_SIZE):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    if producer.flush(120) or failures:
        raise SystemExit(f"{topic}: produce failed: {failures[:3]}")


def _watch_copy(cluster: ReassignCluster, topic: str, target: int,
                timeout: float = 600.0) -> tuple[float, float]:
    """(time of the first byte, time of the last) on broker 2's copy of ``topic``-0."""
    first: float | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        size = cluster.log_bytes(2, topic)
        now = time.monotonic()
        if size > 0 and first is None:
            first = now
        if size >= target:
            assert first is not None
            return first, now
        time.sleep(0.005)
    raise SystemExit(f"broker 2 did not copy {topic}-0 in time")


def bench(cluster: ReassignCluster, total: int) -> list[Result]:
    _create(cluster, "plain", [1, 2])
    _create(cluster, "moved", [1])
    cluster.wait(lambda: len(cluster.state("plain").isr) == 2, 30, "plain's full ISR")
    cluster.brokers[2].stop()
    _produce(cluster.bootstrap_of_live(), "plain", total)
    _produce(cluster.bootstrap_of_live(), "moved", total)
    plain_bytes = cluster.log_bytes(1, "plain")
    moved_bytes = cluster.log_bytes(1, "moved")

    # Plain follower catch-up.
    cluster.brokers[2].start()
    first, last = _watch_copy(cluster, "plain", plain_bytes)
    plain_rate = plain_bytes / max(last - first, 1e-6) / 1e6
    cluster.wait(lambda: len(cluster.state("plain").isr) == 2, 60, "plain's ISR back to 2")

    # Reassignment [1] -> [1, 2].
    started = time.monotonic()
    result = _admin(cluster, lambda a: a.alter_partition_reassignments({("moved", 0): [1, 2]}))
    if result[("moved", 0)] is not None:
        raise SystemExit(f"reassignment refused: {result[('moved', 0)]}")
    first, last = _watch_copy(cluster, "moved", moved_bytes)
    reassign_rate = moved_bytes / max(last - first, 1e-6) / 1e6
    cluster.wait(lambda: not _admin(cluster, lambda a: a.list_partition_reassignments()), 120,
                 "the reassignment to complete")
    end_to_end = time.monotonic() - started
    mb = moved_bytes / 1e6
    return [
        Result(f"reassignment copy rate vs plain follower catch-up ({mb:,.0f} MB, "
               f"broker 1 -> 2, unthrottled)", reassign_rate, "MB/s", baseline=plain_rate,
               target=">= 70% of plain follower catch-up", ok=reassign_rate >= 0.7 * plain_rate,
               extra={"ratio": round(reassign_rate / plain_rate, 3)}),
        Result(f"reassignment end to end: request -> completed ({mb:,.0f} MB)", end_to_end,
               "s", extra={"MB/s": round(mb / end_to_end, 1)}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    args = parser.parse_args()
    reason = zookeeper_unavailable_reason()
    if reason:
        raise SystemExit(f"cannot run the reassignment benchmark: {reason}")
    total = (32 << 20) if args.quick else (128 << 20)
    root = WORK / "reassign"
    shutil.rmtree(root, ignore_errors=True)
    results: list[Result] = []
    with ZooKeeperServer(root / "zk") as zk:
        cluster = ReassignCluster(root, zk, 3)
        cluster.start()
        try:
            cluster.wait(lambda: cluster.registered() == {1, 2, 3}, 60, "3 brokers registered")
            results = bench(cluster, total)
        finally:
            cluster.stop()
    shutil.rmtree(root, ignore_errors=True)
    report(results)


if __name__ == "__main__":
    main()
