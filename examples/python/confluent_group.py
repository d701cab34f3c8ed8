"""Two consumers of one group share a topic's partitions, and commit what they read.

    python examples/python/confluent_group.py --bootstrap 127.0.0.1:9092

The group coordinator splits the 4 partitions between the two members; together they read
every record once; the committed offsets are the partitions' end offsets afterwards.
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--count", type=int, default=400)
    args = parser.parse_args()
    topic, group = f"example-{uuid.uuid4().hex[:8]}", f"group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)

    producer = Producer({"bootstrap.servers": args.bootstrap})
    for i in range(args.count):
        producer.produce(topic, key=str(i), value=str(i))
    if producer.flush(30) != 0:
        raise SystemExit("some records were not delivered")

    members = [Consumer({"bootstrap.servers": args.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10000}) for _ in range(2)]
    for member in members:
        member.subscribe([topic])
    read: dict[int, int] = {0: 0, 1: 0}
    deadline = time.monotonic() + 60
    while sum(read.values()) < args.count and time.monotonic() < deadline:
        for n, member in enumerate(members):
            msgs = member.consume(100, timeout=0.5)
            for msg in msgs:
                if msg.error():
                    raise SystemExit(f"consume error: {msg.error()}")
            if msgs:
                read[n] += len(msgs)
                member.commit(asynchronous=False)
    assignments = [sorted(tp.partition for tp in m.assignment()) for m in members]
    for member in members:
        member.close()
    # The group's committed offsets, read by the admin client once both members have left:
    # a member's own committed() waits for the group to be stable, and a rebalance it does
    # not poll for (the other member joining late) would hold it up.
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    listed = admin.list_consumer_group_offsets([request])[group].result(30)
    committed = listed.topic_partitions
    print(f"member 0 read {read[0]}, member 1 read {read[1]}; assignments {assignments}; "
          f"committed {sum(tp.offset for tp in committed)}")
    if sum(read.values()) != args.count or sum(tp.offset for tp in committed) != args.count:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
