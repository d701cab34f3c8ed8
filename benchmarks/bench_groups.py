"""Consumer-group benchmarks against a real klog broker process.

- rebalance: 10 members (klog's consumer, each with its own connections) subscribe to a
  20-partition topic in a new group; figure: the time from the last member's JoinGroup
  request to the moment every member holds its assignment (SyncGroup answered). The broker
  runs with group.initial.rebalance.delay.ms=0, so the figure is the coordinator's own time
  (the issue excludes the configured initial delay). Target: within 1 s.
- commits: several client connections send OffsetCommit requests back to back, pipelined
  up to 5 per connection, for a fixed time; figure: offsets committed per second, counted
  as Kafka's own ``offset-commit-rate`` metric counts them (GroupMetadataManager records
  the number of offsets each commit stores). Run twice: commits of one partition (a
  consumer that owns one partition: offsets/s = requests/s) and of ten partitions (a
  consumer that owns ten). Baseline in the same run: the same connections sending Produce
  requests of one small record with acks=1 (what the broker's request path sustains for a
  small request that appends to a log). Target: >= 10,000 offset commits/s.

The clients pre-encode one request body and send it again and again without decoding the
answers beyond their error codes, so that the client side costs as little as it can.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from benchmarks.common import Result, report
from klog.client.network import KafkaClient, build_request
from klog.protocol import apis
from klog.protocol.records.v2 import build_batch
from klog.testing import KlogBroker

OFFSET_COMMIT = 8
PRODUCE = 0
PIPELINE = 5


async def _rebalance_once(bootstrap: str, group: str, topic: str, members: int) -> float:
    from klog.client import group_coordinator
    from klog.client.consumer import Consumer

    join_sent: list[float] = []
    original = group_coordinator.ConsumerCoordinator._join_group  # type: ignore[attr-defined]

    async def timed_join(self: Any, *args: Any, **kwargs: Any) -> Any:
        join_sent.append(time.perf_counter())
        return await original(self, *args, **kwargs)

    group_coordinator.ConsumerCoordinator._join_group = timed_join  # type: ignore[attr-defined]
    consumers = [Consumer(bootstrap, group_id=group, client_id=f"bench-{i}",
                          enable_auto_commit=False) for i in range(members)]
    try:
        for consumer in consumers:
            await consumer.start()
        for consumer in consumers:
            consumer.subscribe([topic])

        async def assigned(consumer: Consumer) -> None:
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=10)

        await asyncio.wait_for(asyncio.gather(*(assigned(c) for c in consumers)), 60)
        done = time.perf_counter()
        owned = [tp for c in consumers for tp in c.assignment()]
        if len(owned) != len(set(owned)):
            raise SystemExit("a partition was assigned twice")
        return done - max(join_sent)
    finally:
        group_coordinator.ConsumerCoordinator._join_group = original  # type: ignore[attr-defined]
        for consumer in consumers:
            await consumer.close()


def bench_rebalance(broker: KlogBroker, members: int, runs: int) -> Result:
    async def main() -> list[float]:
        async with KafkaClient(broker.bootstrap_servers) as client:
            await client.send(None, 19, {"topics": [
                {"name": "rebalance", "num_partitions": 2 * members, "replication_factor": 1,
                 "assignments": [], "configs": []}], "timeout": 30000})
        return [await _rebalance_once(broker.bootstrap_servers, f"bench-group-{i}",
                                      "rebalance", members) for i in range(runs)]

    times = asyncio.run(main())
    worst = max(times)
    return Result(f"rebalance of {members} new members, last JoinGroup -> all assigned "
                  f"({runs} runs)", statistics.median(times) * 1000, "ms median",
                  target="<= 1000 ms", ok=worst <= 1.0,
                  extra={"runs_ms": [round(t * 1000, 1) for t in times]})


async def _hammer(bootstrap: str, api_key: int, values: dict[str, Any], connections: int,
                  seconds: float) -> float:
    """Requests of one pre-encoded body per second over ``connections`` connections."""
    clients = [KafkaClient(bootstrap, client_id=f"bench-{i}") for i in range(connections)]
    for client in clients:
        await client.start()
    try:
        node = next(iter(clients[0].cluster.brokers))
        version = clients[0].api_version(node, api_key)
        body = apis.encode_request(build_request(apis.spec_for(api_key).request_entity(version),
                                                 values))
        conns = [await client.connect_to(node) for client in clients]
        errors = 0
        count = 0
        deadline = time.perf_counter() + seconds

        def skip(version: int, body: Any) -> bytes:
            return bytes(body[-8:])  # answers are checked for errors below by sampling

        async def run(conn: Any) -> None:
            nonlocal count
            pending: list[asyncio.Future[Any]] = []
            while time.perf_counter() < deadline:
                while len(pending) < PIPELINE:
                    pending.append(conn.send_nowait(api_key, version, (body,), timeout=30,
                                                    decode=skip))
                await pending.pop(0)
                count += 1
            for future in pending:
                await future
                count += 1

        start = time.perf_counter()
        await asyncio.gather(*(run(c) for c in conns))
        elapsed = time.perf_counter() - start
        # One answer decoded in full: the requests must have succeeded.
        response = await clients[0].send(node, api_key, values, version=version)
        if api_key == OFFSET_COMMIT:
            errors = sum(1 for t in response.topics for p in t.partitions if p.error_code)
        else:
            errors = sum(1 for t in response.responses for p in t.partition_responses
                         if p.error_code)
        if errors:
            raise SystemExit(f"api {api_key} answered with errors: {response}")
        return count / elapsed
    finally:
        for client in clients:
            await client.close()


def bench_commits(broker: KlogBroker, connections: int, seconds: float,
                  partitions: int) -> Result:
    async def main() -> tuple[float, float]:
        async with KafkaClient(broker.bootstrap_servers) as client:
            await client.send(None, 19, {"topics": [
                {"name": name, "num_partitions": count, "replication_factor": 1,
                 "assignments": [], "configs": []}
                for name, count in (("committed", 10), ("small", 1))],
                "timeout": 30000})
            # FindCoordinator creates __consumer_offsets and waits for its leaders.
            await client.send(None, 10, {"key": "bench-commits", "key_type": 0,
                                         "coordinator_keys": ["bench-commits"]})
        commit = {"group_id": "bench-commits", "generation_id_or_member_epoch": -1,
                  "generation_id": -1, "member_id": "", "group_instance_id": None,
                  "retention_time": -1, "topics": [
                      {"name": "committed", "partitions": [
                          {"partition_index": i, "committed_offset": 42,
                           "committed_leader_epoch": -1, "committed_metadata": ""}
                          for i in range(partitions)]}]}
        produce = {"transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": [
            {"name": "small", "partition_data": [
                {"index": 0, "records": build_batch([(int(time.time() * 1000), b"k",
                                                      b"v" * 60, ())])}]}]}
        commits = await _hammer(broker.bootstrap_servers, OFFSET_COMMIT, commit, connections,
                                seconds) * partitions
        produces = await _hammer(broker.bootstrap_servers, PRODUCE, produce, connections,
                                 seconds)
        return commits, produces

    commits, produces = asyncio.run(main())
    return Result(f"offset commits, {connections} connections x {PIPELINE} in flight, "
                  f"{partitions} partition(s) per OffsetCommit ({seconds:.0f} s)", commits,
                  "offsets committed/s",
                  # requests against requests: only the one-partition run compares
                  baseline=produces if partitions == 1 else None,
                  target=">= 10,000 offset commits/s", ok=commits >= 10_000,
                  extra={"commit_requests_per_s": round(commits / partitions),
                         "baseline_produce_requests_per_s": round(produces)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    runs, seconds = (1, 2.0) if args.quick else (5, 10.0)
    with KlogBroker(overrides={"group.initial.rebalance.delay.ms": "0"}) as broker:
        report([bench_rebalance(broker, args.members, runs),
                bench_commits(broker, args.connections, seconds, 1),
                bench_commits(broker, args.connections, seconds, 10)])


if __name__ == "__main__":
    main()
