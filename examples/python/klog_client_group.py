"""klog's own asyncio client in a consumer group, and a transactional klog producer.

    python examples/python/klog_client_group.py --bootstrap 127.0.0.1:9092

A transactional producer commits one transaction and aborts another; two consumers of
one group (klog.client.Consumer with group_id, subscribe) split the topic's partitions,
read with isolation read_committed, and together see the committed records only.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

from klog.client.admin import AdminClient, NewTopic
from klog.client.consumer import Consumer
from klog.client.producer import Producer


async def run(bootstrap: str, count: int) -> int:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"example-{suffix}", f"group-{suffix}"
    async with AdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 4, 1)])
    async with Producer(bootstrap, transactional_id=f"tx-{suffix}") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(count):
            await producer.send(topic, value=f"committed {i}".encode(), key=b"%d" % i)
        await producer.commit_transaction()
        producer.begin_transaction()
        await producer.send(topic, value=b"never seen", key=b"x")
        await producer.abort_transaction()
    members = [Consumer(bootstrap, group_id=group, auto_offset_reset="earliest",
                        isolation_level="read_committed", session_timeout_ms=10_000,
                        heartbeat_interval_ms=500) for _ in range(2)]
    seen: list[bytes] = []
    try:
        for member in members:
            await member.start()
            member.subscribe([topic])
        for _ in range(60):
            for member in members:
                batches = await member.getmany(timeout_ms=250)
                seen += [r.value for records in batches.values() for r in records
                         if r.value is not None]
            if len(seen) >= count:
                break
        assignments = [sorted(tp.partition for tp in m.assignment()) for m in members]
    finally:
        for member in members:
            await member.close()
    print(f"read {len(seen)} committed records; assignments {assignments}")
    return len(seen) if b"never seen" not in seen else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    if asyncio.run(run(args.bootstrap, args.count)) != args.count:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
