"""Client quotas with librdkafka (confluent-kafka) against one klog broker: a producer and
a consumer limited by client-id quotas (set with AlterClientQuotas through klog's admin
client: neither confluent-kafka nor kafka-python has the API) are throttled near their
quota and told the throttle time; with the quota removed they run unthrottled again.

The broker measures over quota.window.num=2 samples of 1 s (Kafka's default is 11), so a
run of a few seconds is dominated by the rate, not by the first window's allowance.
The assertions are bounds the broker's accounting guarantees (bytes delivered within the
quota's allowance for the time taken), never speeds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from klog.client.admin import AdminClient
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(120)

QUOTA = 100_000  # bytes/s
VALUE = b"q" * 1000


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"quota.window.num": "2", "quota.window.size.seconds": "1", "num.partitions": "1"}


def _alter(broker: KlogBroker, entity: dict[str, str | None],
           ops: dict[str, float | None]) -> None:
    async def main() -> None:
        async with AdminClient(broker.bootstrap_servers) as admin:
            errors = await admin.alter_client_quotas([(entity, ops)])
            assert errors == [None]
            described = await admin.describe_client_quotas(
                [(t, 0, n) for t, n in entity.items()], strict=True)
            wanted = {k: v for k, v in ops.items() if v is not None}
            assert described == ([(entity, wanted)] if wanted else [])
    asyncio.run(main())


def _produce_for(broker: KlogBroker, topic: str, client_id: str, seconds: float
                 ) -> tuple[int, float, list[int]]:
    """Produce as fast as the broker lets the client for ``seconds``; (bytes acknowledged,
    seconds taken, throttle times librdkafka reported)."""
    throttles: list[int] = []
    delivered = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += len(msg.value())

    producer = Producer({
        "bootstrap.servers": broker.bootstrap_servers, "client.id": client_id,
        "linger.ms": 5, "batch.size": 16384, "acks": 1,
        "queue.buffering.max.kbytes": 256,
        "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
    })
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:  # the local queue is full: the broker is holding us back
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    return delivered[0], time.monotonic() - start, throttles


def test_a_producer_over_its_client_id_quota_is_throttled_then_freed(
        broker: KlogBroker) -> None:
    topic = "quota-produce"
    _alter(broker, {"client-id": "slow-producer"}, {"producer_byte_rate": QUOTA})
    delivered, elapsed, throttles = _produce_for(broker, topic, "slow-producer", 4.0)
    # Within the quota's allowance for the time taken (plus the first window and one
    # request in flight per partition), far below an unthrottled producer.
    assert delivered <= QUOTA * (elapsed + 2) + 5 * 16384 + 100_000
    assert delivered >= QUOTA  # and it did make progress
    # the broker said so, and librdkafka heard it (KIP-219's throttle_time_ms)
    assert throttles and max(throttles) > 0
    # another client id on the same broker is not limited
    other, other_elapsed, other_throttles = _produce_for(broker, topic, "fast-producer", 2.0)
    assert not [t for t in other_throttles if t > 0]
    assert other > QUOTA * (other_elapsed + 2) + 5 * 16384 + 100_000
    # quota removed: the same client id is not throttled any more
    _alter(broker, {"client-id": "slow-producer"}, {"producer_byte_rate": None})
    freed, freed_elapsed, freed_throttles = _produce_for(broker, topic, "slow-producer", 2.0)
    assert not [t for t in freed_throttles if t > 0]
    assert freed > QUOTA * (freed_elapsed + 2) + 5 * 16384 + 100_000


def _consume_for(broker: KlogBroker, topic: str, client_id: str, seconds: float
                 ) -> tuple[int, float, list[int]]:
    throttles: list[int] = []
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "client.id": client_id,
        "group.id": f"g-{client_id}-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
    })
    consumer.subscribe([topic])
    consumed = 0
    start = time.monotonic()
    first: float | None = None
    while time.monotonic() - start < seconds + 10:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            if first is None:
                first = time.monotonic()
            consumed += len(msg.value())
        if first is not None and time.monotonic() - first >= seconds:
            break
    elapsed = time.monotonic() - (first or start)
    consumer.close()
    return consumed, elapsed, throttles


def test_a_consumer_over_its_client_id_quota_is_throttled_then_freed(
        broker: KlogBroker) -> None:
    topic = "quota-consume"
    # batches well under the quota's window: a fetch answers whole batches, and one batch
    # bigger than what the quota allows in its window could never be fetched (as in Kafka)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20,
                         "batch.size": 16384})
    for _ in range(3000):  # 3 MB
        producer.produce(topic, VALUE)
        producer.poll(0)
    assert producer.flush(60) == 0
    _alter(broker, {"client-id": "slow-consumer"}, {"consumer_byte_rate": QUOTA})
    consumed, elapsed, throttles = _consume_for(broker, topic, "slow-consumer", 3.0)
    # a fetch takes at most the quota's window (2 x 100 KB here), then the rate holds it
    assert 0 < consumed <= QUOTA * (elapsed + 2) + 2 * QUOTA
    assert throttles and max(throttles) > 0
    _alter(broker, {"client-id": "slow-consumer"}, {"consumer_byte_rate": None})
    freed, freed_elapsed, freed_throttles = _consume_for(broker, topic, "slow-consumer", 1.0)
    assert not [t for t in freed_throttles if t > 0]
    assert freed == 3000 * len(VALUE) or freed > QUOTA * (freed_elapsed + 4)
