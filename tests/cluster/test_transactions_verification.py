"""KIP-890 part 1 in a two-broker cluster (real ZooKeeper): the data partition's leader is
not the transaction coordinator, so it asks the coordinator's broker with
AddPartitionsToTxn v4 (verify_only) over the inter-broker listener before it appends a
producer's first transactional batch.

A late write of an aborted transaction (a hung or zombie producer's batch, sent by hand)
is refused and the last stable offset does not hang; a coordinator that does not answer
(SIGSTOP) or has moved (killed, its partition taken over) makes the leader answer
NOT_ENOUGH_REPLICAS, which producers retry, until it answers again; and confluent-kafka,
kafka-python and aiokafka transactions over partitions of both brokers still commit and
abort as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from klog.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster
from tests.cluster.test_transactions import consume
from tests.daemon.transaction.raw import RawTransaction, find_coordinator, offsets, wait_for_state
from tests.daemon.wire import WireClient

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {
    "transaction.state.log.replication.factor": "2",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.replication.factor": "2",
    # A coordinator that does not answer is given up on after this (Kafka: the inter-broker
    # request timeout), well within the ZooKeeper session of SHORT_TIMEOUTS.
    "request.timeout.ms": "2000",
}
NOT_ADDED = "Partition was not added to the transaction"
UNVERIFIED = "Unable to verify the partition has been added to the transaction. Underlying " \
             "error: "


@contextmanager
def wire(c: Cluster, broker_id: int) -> Iterator[WireClient]:
    with WireClient(("127.0.0.1", c.broker(broker_id).port)) as client:
        yield client


def split(c: Cluster, topic: str, txn_id: str) -> tuple[int, int, int]:
    """(coordinator of ``txn_id``, the other broker, a partition of ``topic`` it leads)."""
    with wire(c, c.ids[0]) as any_broker:
        coordinator = find_coordinator(any_broker, txn_id)
    leader = next(b for b in c.ids if b != coordinator)
    partition = next(p for p in range(2) if c.leader(topic, p) == leader)
    return coordinator, leader, partition


def test_a_late_write_to_a_leader_that_is_not_the_coordinator_is_refused(
        cluster: Callable[..., Cluster]) -> None:
    c = cluster(brokers=2, overrides=OVERRIDES)
    c.create_topic("v", partitions=2, replication_factor=1)
    coordinator, leader, p = split(c, "v", "zombie")
    with wire(c, coordinator) as coord, wire(c, leader) as lead:
        txn = RawTransaction(coord, "zombie")
        txn.init()
        early = txn.produce(lead, "v", p, b"before-add")
        assert (early.error_code, early.error_message) == (ErrorCode.INVALID_TXN_STATE,
                                                           NOT_ADDED)
        txn.add([("v", p)])
        assert txn.produce(lead, "v", p, b"in").error_code == 0
        assert txn.produce(lead, "v", p, b"in-2").error_code == 0
        txn.end(commit=False)
        wait_for_state(coord, "zombie", "CompleteAbort")
        assert offsets(lead, "v", p) == (3, 3)  # two records and the ABORT marker
        # The zombie's late batch, to the leader that is not its coordinator.
        late = txn.produce(lead, "v", p, b"late")
        assert (late.error_code, late.error_message) == (ErrorCode.INVALID_TXN_STATE,
                                                         NOT_ADDED)
        assert offsets(lead, "v", p) == (3, 3)
        # A read_committed consumer is not held back.
        plain = lead.produce("v", p, _plain_batch(b"after"), acks=-1)
        assert plain.responses[0].partition_responses[0].error_code == 0
    assert consume(c.bootstrap_servers, "v", 2, "read_committed", 1) == [b"after"]


def _plain_batch(value: bytes) -> bytes:
    from tests.daemon.wire import batch

    return batch(1, value)


def test_a_coordinator_that_does_not_answer_or_moved(cluster: Callable[..., Cluster]) -> None:
    """NOT_ENOUGH_REPLICAS (retriable, no metadata refresh) while the leader cannot get
    an answer: the coordinator is stopped (SIGSTOP: the request times out), then killed
    (its __transaction_state partition moves to the leader's broker, which then answers
    in-process from the transaction it loaded)."""
    c = cluster(brokers=2, overrides=OVERRIDES)
    c.create_topic("m", partitions=2, replication_factor=1)
    c.create_topic("m2", partitions=2, replication_factor=1)
    coordinator, leader, p = split(c, "m", "moving")
    q = next(q for q in range(2) if c.leader("m2", q) == leader)
    with wire(c, coordinator) as coord, wire(c, leader) as lead:
        txn = RawTransaction(coord, "moving")
        txn.init()
        txn.add([("m", p)])
        c.pause(coordinator)
        try:
            started = time.monotonic()
            stalled = txn.produce(lead, "m", p, b"stalled")
            waited = time.monotonic() - started
        finally:
            c.resume(coordinator)
        assert (stalled.error_code, stalled.error_message) == (
            ErrorCode.NOT_ENOUGH_REPLICAS, UNVERIFIED + "NETWORK_EXCEPTION")
        assert waited < 10  # the request timeout (2 s), not forever
        assert txn.produce(lead, "m", p, b"answered").error_code == 0
        # Another partition the leader leads joins the transaction; then the coordinator
        # is killed before its first batch, which needs verifying.
        txn.add([("m2", q)])
    state_partition = _state_partition(c, "moving")
    c.kill(coordinator)
    with wire(c, leader) as lead:
        seen: set[tuple[int, str]] = set()
        deadline = time.monotonic() + 60
        while True:
            result = txn.produce(lead, "m2", q, b"after-move")
            if result.error_code == 0:
                break
            seen.add((int(result.error_code), result.error_message))
            assert result.error_code == ErrorCode.NOT_ENOUGH_REPLICAS, result
            assert time.monotonic() < deadline, seen
            time.sleep(0.2)
        assert c.leader("__transaction_state", state_partition) == leader
        # Until the controller moved the coordinator's partition (the dead broker's
        # ZooKeeper session had to expire first), the leader could not verify.
        print("answers while the coordinator moved:", seen)
        assert seen
        assert {m.removeprefix(UNVERIFIED) for _code, m in seen} <= {
            "NETWORK_EXCEPTION", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR",
            "COORDINATOR_LOAD_IN_PROGRESS"}
        txn.coordinator = lead
        txn.end(commit=True)
        wait_for_state(lead, "moving", "CompleteCommit", timeout=60)
        assert offsets(lead, "m", p) == (2, 2)  # "stalled" was refused: "answered", marker
        assert offsets(lead, "m2", q) == (2, 2)  # "after-move", marker
    assert sorted(consume(c.bootstrap_of([leader]), "m2", 2, "read_committed", 1)) == [
        b"after-move"]


def _state_partition(c: Cluster, txn_id: str) -> int:
    from klog.daemon.group.metadata_manager import java_string_hash, kafka_abs

    return kafka_abs(java_string_hash(txn_id)) % 3


def test_real_clients_transactions_across_brokers(cluster: Callable[..., Cluster]) -> None:
    """librdkafka, kafka-python and aiokafka transactions over two partitions, one led by
    each broker: whichever broker coordinates, one partition's leader verifies remotely."""
    from confluent_kafka import Producer as CkProducer

    c = cluster(brokers=2, overrides=OVERRIDES)
    c.create_topic("clients", partitions=2, replication_factor=1)
    assert {c.leader("clients", p) for p in (0, 1)} == {1, 2}
    bootstrap = c.bootstrap_servers

    ck = CkProducer({"bootstrap.servers": bootstrap, "transactional.id": "ck-txn",
                     "transaction.timeout.ms": 20000})
    ck.init_transactions(30)
    for commit in (True, False):
        ck.begin_transaction()
        for p in (0, 1):
            ck.produce("clients", f"ck-{commit}-{p}".encode(), partition=p)
        if commit:
            ck.commit_transaction(30)
        else:
            ck.flush(30)
            ck.abort_transaction(30)

    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-txn",
                       transaction_timeout_ms=20000)
    try:
        kp.init_transactions()
        for commit in (True, False):
            kp.begin_transaction()
            for p in (0, 1):
                kp.send("clients", f"kp-{commit}-{p}".encode(), partition=p)
            if commit:
                kp.commit_transaction()
            else:
                kp.flush()
                kp.abort_transaction()
    finally:
        kp.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-txn",
                                    transaction_timeout_ms=20000)
        await producer.start()
        try:
            for commit in (True, False):
                await producer.begin_transaction()
                for p in (0, 1):
                    await producer.send_and_wait("clients", f"aio-{commit}-{p}".encode(),
                                                 partition=p)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(aio())
    committed = consume(bootstrap, "clients", 2, "read_committed", 6)
    assert sorted(committed) == sorted(f"{client}-True-{p}".encode()
                                       for client in ("ck", "kp", "aio") for p in (0, 1))
    assert len(consume(bootstrap, "clients", 2, "read_uncommitted", 12)) == 12
