"""Produce keyed records with confluent-kafka (librdkafka) and read them back.

    python examples/python/confluent_produce_consume.py --bootstrap 127.0.0.1:9092

Idempotent producer (acks=all), a consumer assigned to every partition from the start;
exits 0 once it has read back every record it wrote.
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    topic = f"example-{uuid.uuid4().hex[:8]}"

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[
        topic].result(timeout=30)

    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    for i in range(args.count):
        producer.produce(topic, key=f"user-{i % 50}", value=f"event {i}")
        producer.poll(0)
    if producer.flush(30) != 0:
        raise SystemExit("some records were not delivered")

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < args.count and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=1.0):
            if msg.error():
                raise SystemExit(f"consume error: {msg.error()}")
            seen.add(msg.value())
    consumer.close()
    print(f"produced and read back {len(seen)} of {args.count} records on {topic}")
    if len(seen) != args.count:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
