"""Preferred leader election over 1,000 partitions: 3 klog brokers on a real ZooKeeper
(loopback, one machine).

A topic of 1,000 partitions is created with broker 1 as the preferred replica of every
one of them (replicas [1, 2] and [1, 3] alternately: the worst case, every partition has
to move); then, per run, broker 1 is stopped (its controlled shutdown moves all 1,000
leaderships to the followers), started again and waited for until it is back in every
ISR. Then one ElectLeaders request (PREFERRED, all partitions) goes to the controller
through klog's admin client and all 1,000 leaderships move back. Figures:

- answered: the time until the controller answers (all state znodes written, LeaderAndIsr
  and UpdateMetadata queued to the brokers);
- visible: the time until a Metadata request to every broker names the preferred replica
  as the leader of all 1,000 partitions (what clients see) -- the figure held to the
  target, < 2 s.

Needs java and Debian's ``zookeeper`` package (``make test`` installs them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import struct
import time
from pathlib import Path
from typing import Any

from benchmarks import bench_cluster
from benchmarks.common import WORK, Result, report
from klog.client.admin import AdminClient, NewTopic
from klog.cluster_runner import ZooKeeperServer, zookeeper_unavailable_reason
from klog.daemon.metastore import paths
from klog.testing import KlogBroker

TOPIC = "elections"
SETTINGS = {
    "zookeeper.session.timeout.ms": "10000",
    "replica.lag.time.max.ms": "10000",
    "replica.fetch.wait.max.ms": "200",
    "replica.socket.timeout.ms": "10000",
    "controller.socket.timeout.ms": "10000",
    "controlled.shutdown.retry.backoff.ms": "200",
    "offsets.topic.replication.factor": "3",
    "auto.leader.rebalance.enable": "false",
}


class Broker(KlogBroker):
    """A KlogBroker started with ``--log-level``."""

    log_level = "INFO"

    def command(self) -> list[str]:
        return [*super().command(), "--log-level", self.log_level]


class Cluster(bench_cluster.Cluster):
    def __init__(self, root: Path, zk: ZooKeeperServer, count: int,
                 log_level: str = "INFO") -> None:
        def make_broker(data_dir: Path, overrides: dict[str, str]) -> Broker:
            broker = Broker(data_dir, overrides=overrides)
            broker.log_level = log_level
            return broker

        super().__init__(root, zk, count, SETTINGS, make_broker)

    def states(self, partitions: int) -> dict[int, Any]:
        out = {}
        for p in range(partitions):
            data, _ = self.store.get(paths.partition_state_path(TOPIC, p))
            out[p] = paths.LeaderIsrAndControllerEpoch.decode(data)
        return out

    def replicas(self) -> dict[int, tuple[int, ...]]:
        data, _ = self.store.get(paths.topic_path(TOPIC))
        assignment = paths.TopicAssignment.decode(data, TOPIC)
        return {p: tuple(ra.replicas) for p, ra in assignment.partitions.items()}

    def wait(self, predicate: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
        return super().wait(predicate, timeout, what, interval)


async def _metadata_leaders(bootstrap: str) -> dict[int, int]:
    async with AdminClient(bootstrap) as admin:
        described = await admin.describe_topics([TOPIC])
        return {p.partition: p.leader for p in described[TOPIC].partitions}


async def _all_isrs_full(cluster: Cluster, rf: int) -> bool:
    for b in cluster.brokers.values():
        async with AdminClient(b.bootstrap_servers) as admin:
            described = await admin.describe_topics([TOPIC])
            if any(len(p.isr) < rf for p in described[TOPIC].partitions):
                return False
    return True


async def _create(cluster: Cluster, partitions: int) -> None:
    assignment = {p: [1, 2 + p % 2] for p in range(partitions)}
    async with AdminClient(cluster.bootstrap, request_timeout_ms=120000) as admin:
        errors = await admin.create_topics([NewTopic(TOPIC, replica_assignment=assignment)],
                                           timeout_ms=120000)
        if errors[TOPIC] is not None:
            raise SystemExit(f"cannot create {TOPIC}: {errors[TOPIC]}")


class MetadataProbe:
    """Metadata v1 requests to one broker over a plain socket, parsed with struct: the
    leaders of TOPIC as that broker's metadata cache has them. (klog's admin client takes
    ~150 ms of CPU to decode 1,000 partitions; polling three brokers with it would load
    the machine the brokers run on and blur the figure.)"""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        name = TOPIC.encode()
        client = b"bench-elections"
        header = struct.pack(">hhih", 3, 1, 1, len(client)) + client
        body = struct.pack(">ih", 1, len(name)) + name
        self.request = struct.pack(">i", len(header) + len(body)) + header + body

    async def leaders(self) -> dict[int, int]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(self.request)
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        data = await self.reader.readexactly(size)
        pos = 4  # correlation id

        def i16() -> int:
            nonlocal pos
            pos += 2
            return int(struct.unpack_from(">h", data, pos - 2)[0])

        def i32() -> int:
            nonlocal pos
            pos += 4
            return int(struct.unpack_from(">i", data, pos - 4)[0])

        def string() -> None:
            nonlocal pos
            n = i16()  # before pos is read: i16 moves it
            pos += max(n, 0)

        for _ in range(i32()):  # brokers: node id, host, port, rack
            i32()
            string()
            i32()
            string()
        i32()  # controller id
        out: dict[int, int] = {}
        for _ in range(i32()):
            i16()
            string()
            pos += 1  # is_internal
            for _ in range(i32()):
                i16()
                partition, leader = i32(), i32()
                replicas = i32()
                pos += 4 * replicas
                isr = i32()
                pos += 4 * isr
                out[partition] = leader
        return out

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _elect_and_watch(cluster: Cluster, want: dict[int, int]) -> tuple[float, float, int]:
    """(answered s, visible s, partitions elected)."""
    admin = AdminClient(cluster.bootstrap, request_timeout_ms=60000)
    await admin.start()
    watchers = [MetadataProbe(b.host, b.port) for b in cluster.brokers.values()]
    for w in watchers:
        if len(await w.leaders()) != len(want):
            raise SystemExit("the metadata probe does not see every partition")
    try:
        # Metadata and connections warm: the clock measures the election only.
        await admin.describe_cluster()
        started = time.perf_counter()
        results = await admin.elect_leaders("preferred", None)
        answered = time.perf_counter() - started
        failed = {tp: e for tp, e in results.items() if e is not None}
        if failed:
            raise SystemExit(f"{len(failed)} partitions failed, e.g. "
                             f"{next(iter(failed.items()))}")

        async def sees_all(w: MetadataProbe) -> None:
            while await w.leaders() != want:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(asyncio.gather(*(sees_all(w) for w in watchers)), 60)
        visible = time.perf_counter() - started
        return answered, visible, len(results)
    finally:
        await admin.close()
        for w in watchers:
            w.close()


def bench(cluster: Cluster, partitions: int, runs: int) -> Result:
    rf = 2
    asyncio.run(_create(cluster, partitions))
    cluster.wait(lambda: all(s.leader >= 0 and len(s.isr) == rf
                             for s in cluster.states(partitions).values()),
                 180, "every partition led with a full ISR")
    replicas = cluster.replicas()
    want = {p: r[0] for p, r in replicas.items()}
    answered_s: list[float] = []
    visible_s: list[float] = []
    moved: list[int] = []
    for run in range(runs):
        broker_id = 1
        broker = cluster.brokers[broker_id]
        broker.stop()
        cluster.wait(lambda b=broker_id: all(s.leader != b for s in
                                             cluster.states(partitions).values()),
                     60, f"broker {broker_id}'s leaderships moved")
        broker.start()
        try:
            cluster.wait(lambda b=broker_id: all(b in s.isr for p, s in
                                                 cluster.states(partitions).items()
                                                 if b in replicas[p]),
                         180, f"broker {broker_id} back in every ISR")
        except SystemExit:
            lagging = {p: (s.leader, s.isr) for p, s in cluster.states(partitions).items()
                       if broker_id not in s.isr and broker_id in replicas[p]}
            print(f"not back in the ISR of {len(lagging)} partitions, e.g. "
                  f"{sorted(lagging.items())[:5]}", flush=True)
            for i, b in cluster.brokers.items():
                print(f"--- broker {i} ---\n{b.log_tail(30)}", flush=True)
            raise
        # Settled: every broker's metadata has broker 1 back in the ISRs (the controller
        # has handled the ISR changes), so the clock measures the election alone.
        cluster.wait(lambda: asyncio.run(_all_isrs_full(cluster, rf)), 120,
                     "every broker's metadata showing full ISRs")
        answered, visible, elected = asyncio.run(_elect_and_watch(cluster, want))
        for b in cluster.brokers.values():
            lines = [ln for ln in b.log_file.read_text(errors="replace").splitlines()
                     if "leader election:" in ln]
            if lines:
                print(f"  controller: {lines[-1].split('INFO', 1)[-1].strip()}", flush=True)
        answered_s.append(answered)
        visible_s.append(visible)
        moved.append(elected)
        print(f"run {run + 1}: broker {broker_id} restarted, {elected} partitions elected: "
              f"answered {answered * 1000:.0f} ms, visible on every broker "
              f"{visible * 1000:.0f} ms", flush=True)
    worst = max(visible_s)
    return Result(f"preferred election moving {partitions} partitions (RF {rf}, 3 brokers), "
                  f"until every broker's metadata shows it, worst of {runs}",
                  worst * 1000, "ms", target="< 2000 ms", ok=worst < 2.0,
                  extra={"visible_ms": [round(t * 1000) for t in visible_s],
                         "answered_ms": [round(t * 1000) for t in answered_s],
                         "partitions_elected": moved})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--log-level", default="INFO",
                        help="the brokers' --log-level (INFO: as `klog broker start`)")
    args = parser.parse_args()
    reason = zookeeper_unavailable_reason()
    if reason:
        raise SystemExit(f"cannot run the election benchmark: {reason}")
    partitions = args.partitions or (100 if args.quick else 1000)
    runs = args.runs or (1 if args.quick else 3)
    # The brokers' log lines unwrapped, so the controller's timing line reads whole.
    os.environ.setdefault("COLUMNS", "250")
    root = WORK / "elections"
    shutil.rmtree(root, ignore_errors=True)
    with ZooKeeperServer(root / "zk") as zk:
        cluster = Cluster(root, zk, 3, args.log_level)
        cluster.start()
        try:
            result = bench(cluster, partitions, runs)
        finally:
            cluster.stop()
    shutil.rmtree(root, ignore_errors=True)
    report([result])


if __name__ == "__main__":
    main()
