"""Exactly once with confluent-kafka: a consume-transform-produce loop in transactions.

    python examples/python/confluent_transactions.py --bootstrap 127.0.0.1:9092

Writes N records to an input topic, then copies them upper-cased to an output topic in
transactions of 100: each transaction carries the output records and the consumer
group's offsets (send_offsets_to_transaction), so a crash can neither lose nor repeat a
record. One transaction is aborted on purpose; a read_committed consumer of the output
then finds every input record exactly once.
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
    parser.add_argument("--count", type=int, default=500)
    args = parser.parse_args()
    suffix = uuid.uuid4().hex[:8]
    source, sink, group = f"in-{suffix}", f"out-{suffix}", f"copier-{suffix}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for f in admin.create_topics([NewTopic(source, 2, 1), NewTopic(sink, 2, 1)]).values():
        f.result(30)

    plain = Producer({"bootstrap.servers": args.bootstrap})
    for i in range(args.count):
        plain.produce(source, key=str(i), value=f"record {i}")
    if plain.flush(30):
        raise SystemExit("input not delivered")

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": args.bootstrap,
                         "transactional.id": f"copier-{suffix}"})
    producer.init_transactions(30)
    copied, aborted_once = 0, False
    deadline = time.monotonic() + 60
    while copied < args.count and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(100, timeout=1.0) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for msg in batch:
            producer.produce(sink, key=msg.key(), value=msg.value().upper())
        if not aborted_once:
            # Aborted: none of these reach read_committed readers, and the group's
            # position goes back to the last committed offsets.
            producer.flush(30)
            producer.abort_transaction(30)
            aborted_once = True
            for tp in consumer.assignment():
                committed = consumer.committed([tp], timeout=30)[0].offset
                consumer.seek(TopicPartition(tp.topic, tp.partition,
                                             committed if committed >= 0 else 0))
            continue
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        copied += len(batch)
    consumer.close()

    reader = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"reader-{suffix}",
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    reader.subscribe([sink])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < args.count and time.monotonic() < deadline:
        seen += [m.value() for m in reader.consume(500, timeout=1.0) if m.error() is None]
    reader.close()
    print(f"copied {copied}; the output holds {len(seen)} records, {len(set(seen))} distinct")
    if sorted(seen) != sorted(f"RECORD {i}".encode() for i in range(args.count)):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
