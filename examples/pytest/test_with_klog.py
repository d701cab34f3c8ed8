"""A test suite of your own against a real klog broker, through the klog_broker fixture.

klog installs a pytest plugin (klog.testing): each test that asks for ``klog_broker`` gets
its own broker process on a free loopback port, stopped and removed afterwards.

    pytest examples/pytest/test_with_klog.py
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition


def test_round_trip(klog_broker: Any) -> None:
    producer = Producer({"bootstrap.servers": klog_broker.bootstrap_servers})
    producer.produce("greetings", key=b"k", value=b"hello from a test")
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": klog_broker.bootstrap_servers,
                         "group.id": "example"})
    consumer.assign([TopicPartition("greetings", 0, 0)])
    msg = consumer.poll(30)
    consumer.close()
    assert msg is not None and msg.error() is None
    assert msg.value() == b"hello from a test"


def test_survives_a_restart(klog_broker: Any) -> None:
    producer = Producer({"bootstrap.servers": klog_broker.bootstrap_servers, "acks": "all"})
    producer.produce("durable", value=b"kept")
    assert producer.flush(30) == 0
    klog_broker.kill()  # kill -9: acknowledged records survive
    klog_broker.start()
    consumer = Consumer({"bootstrap.servers": klog_broker.bootstrap_servers,
                         "group.id": "example"})
    consumer.assign([TopicPartition("durable", 0, 0)])
    msg = consumer.poll(30)
    consumer.close()
    assert msg is not None and msg.value() == b"kept"
