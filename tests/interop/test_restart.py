"""The broker stopped (SIGTERM) or killed (SIGKILL) while a producer keeps writing: after the
restart every acknowledged message is in the log, at the offset it was acknowledged with,
in order, and the only duplicates are batches the client had in flight and resent.

The producer is librdkafka with one request in flight (so a resend can only repeat the
batch right before it) and no idempotence (that is tests/interop/test_idempotence.py's
subject): what is checked here is the log's durability, not deduplication.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from klog.testing import KlogBroker
from tests.interop.conftest import wait_until_serving

pytestmark = pytest.mark.timeout(120)

BEFORE = 3000  # acknowledged messages before the disruption
AFTER = 2000  # ... and after the restart


def _read_log(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(offset, sequence number) of every record of partition 0, up to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        low, count = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert low == 0
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), int(msg.value())))
        return got
    finally:
        consumer.close()


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _produce_through_disruption(broker: KlogBroker, topic: str, acks: str,
                                disrupt: Callable[[], None]) -> None:
    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers,
        "acks": acks,
        "enable.idempotence": False,
        "max.in.flight.requests.per.connection": 1,
        "linger.ms": 2,
        "batch.num.messages": 200,
        "message.timeout.ms": 60_000,
        "retry.backoff.ms": 50,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
    })
    acked: dict[int, int] = {}  # sequence number -> offset
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[int(msg.value())] = msg.offset()

    stop = threading.Event()
    sent = [0]

    def keep_producing() -> None:
        while not stop.is_set():
            try:
                producer.produce(topic, value=b"%09d" % sent[0], partition=0,
                                 on_delivery=on_delivery)
            except BufferError:
                producer.poll(0.01)
                continue
            sent[0] += 1
            producer.poll(0)
            if sent[0] % 50 == 0:
                time.sleep(0.002)  # a steady stream, not one burst

    thread = threading.Thread(target=keep_producing, daemon=True)
    thread.start()
    try:
        _wait_for(lambda: len(acked) >= BEFORE, 30, f"{BEFORE} acknowledgements")
        disrupt()
        # What the client may resend: everything sent but not yet acknowledged.
        in_flight_at_disruption = sent[0] - len(acked)
        acked_at_disruption = dict(acked)
        broker.start()  # the producer reconnects by itself, with retries
        _wait_for(lambda: len(acked) >= len(acked_at_disruption) + AFTER, 60,
                  "acknowledgements after the restart")
    finally:
        stop.set()
        thread.join(10)
    assert producer.flush(60) == 0
    assert not errors, errors[:5]
    total = sent[0]
    assert len(acked) == total

    wait_until_serving(broker, [topic])
    log = _read_log(broker.bootstrap_servers, topic)
    offsets = [o for o, _ in log]
    assert offsets == list(range(len(log))), "offsets are contiguous from 0"
    by_offset = dict(log)
    # Every acknowledged message is where its acknowledgement said.
    misplaced = {seq: off for seq, off in acked.items() if by_offset.get(off) != seq}
    assert not misplaced, list(misplaced.items())[:5]
    # In order: dropping repeats leaves 0, 1, 2, ... total-1.
    firsts: list[int] = []
    seen: set[int] = set()
    for _, seq in log:
        if seq not in seen:
            seen.add(seq)
            firsts.append(seq)
    assert firsts == list(range(total))
    duplicates = len(log) - total
    assert duplicates <= in_flight_at_disruption
    # A resent record repeats a message that was unacknowledged at the disruption.
    acked_before = set(acked_at_disruption)
    repeated = {seq for seq in seen if sum(1 for _, s in log if s == seq) > 1} \
        if duplicates else set()
    assert not repeated & acked_before


@pytest.mark.parametrize("acks", ["1", "all"])
def test_clean_restart_while_producing(broker: KlogBroker, topic: str, acks: str) -> None:
    def stop() -> None:
        assert broker.stop() == 0
        assert (broker.log_dir / ".kafka_cleanshutdown").exists()

    _produce_through_disruption(broker, topic, acks, stop)


@pytest.mark.parametrize("acks", ["1", "all"])
def test_kill_9_while_producing(broker: KlogBroker, topic: str, acks: str) -> None:
    def kill() -> None:
        broker.kill()
        assert not (broker.log_dir / ".kafka_cleanshutdown").exists()

    _produce_through_disruption(broker, topic, acks, kill)


def test_everything_survives_restarts(broker: KlogBroker, topic: str) -> None:
    """A finished topic survives a kill -9 and a clean restart byte for byte, and the next
    produce continues at the old log end offset."""
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5,
                         "compression.type": "zstd"})
    for i in range(1000):
        producer.produce(topic, key=b"%d" % i, value=b"%09d" % i, partition=0,
                         headers=[("h", b"%d" % i)])
    assert producer.flush(20) == 0
    del producer
    expected = [(i, i) for i in range(1000)]
    assert _read_log(broker.bootstrap_servers, topic) == expected
    broker.kill()
    broker.start()
    wait_until_serving(broker, [topic])
    assert _read_log(broker.bootstrap_servers, topic) == expected
    broker.restart()
    wait_until_serving(broker, [topic])
    assert _read_log(broker.bootstrap_servers, topic) == expected
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    reports: list[Any] = []
    producer.produce(topic, value=b"%09d" % 1000, partition=0,
                     on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(20) == 0
    assert reports == [(None, 1000)]
