"""klog's own asyncio client: produce with klog.client.Producer, read back with Consumer.

    python examples/python/klog_client.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

from klog.client.consumer import Consumer
from klog.client.producer import Producer


async def run(bootstrap: str, count: int) -> int:
    topic = f"example-{uuid.uuid4().hex[:8]}"  # auto-created on first use
    async with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        for i in range(count):
            await producer.send(topic, value=f"event {i}".encode(), key=b"k", partition=0)
        await producer.flush()
    read = 0
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        while read < count:
            batches = await consumer.getmany(timeout_ms=5000)
            if not batches:
                break
            read += sum(len(records) for records in batches.values())
    print(f"produced {count} and read back {read} records on {topic}")
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--count", type=int, default=500)
    args = parser.parse_args()
    if asyncio.run(run(args.bootstrap, args.count)) != args.count:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
