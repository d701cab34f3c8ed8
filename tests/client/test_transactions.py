"""klog.client.transactions over a fake KafkaClient: the coordinator found with key type 1,
InitProducerId / AddPartitionsToTxn / EndTxn with the transactional id, retried while the
coordinator loads, is busy or moved, and errors that end the transaction raised; and a
transactional producer's batches carry the isTransactional bit."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from klog.client.accumulator import ProducerBatch
from klog.client.errors import KafkaClientError
from klog.client.transactions import TransactionManager
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import iter_batch_headers
from klog.protocol.records.compression import CompressionType

FIND_COORDINATOR, INIT, ADD, END = 10, 22, 24, 26


class FakeClient:
    """Answers from a script: api key -> a list of responses (the last one repeats)."""

    def __init__(self, script: dict[int, list[Any]]) -> None:
        self.script = script
        self.sent: list[tuple[int | None, int, dict[str, Any]]] = []
        self.cluster = SimpleNamespace(brokers={1: None, 2: None})
        self.coordinators = [1, 2]

    def api_version(self, node: int, api_key: int, max_version: int | None = None) -> int:
        return 3 if max_version is None else min(3, max_version)

    async def refresh_metadata(self, topics: Any) -> None:
        return None

    async def send(self, node: int | None, api_key: int, values: dict[str, Any],
                   version: int | None = None) -> Any:
        self.sent.append((node, api_key, dict(values)))
        if api_key == FIND_COORDINATOR:
            node_id = self.coordinators.pop(0) if len(self.coordinators) > 1 \
                else self.coordinators[0]
            return SimpleNamespace(coordinators=[SimpleNamespace(
                error_code=0, node_id=node_id, host="h", port=1)])
        answers = self.script[api_key]
        return answers.pop(0) if len(answers) > 1 else answers[0]


def _manager(client: FakeClient) -> TransactionManager:
    return TransactionManager(client, "tx-1", transaction_timeout_ms=30_000,  # type: ignore[arg-type]
                              retry_backoff_ms=1, max_wait_ms=5_000)


def _add_response(code: int, *tps: tuple[str, int]) -> Any:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return SimpleNamespace(error_code=0, results_by_topic_v3_and_below=[
        SimpleNamespace(name=t, results_by_partition=[
            SimpleNamespace(partition_index=p, partition_error_code=code) for p in ps])
        for t, ps in by_topic.items()])


def test_the_transactional_flow_with_retries() -> None:
    client = FakeClient({
        INIT: [SimpleNamespace(error_code=int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)),
               SimpleNamespace(error_code=0, producer_id=42, producer_epoch=3)],
        ADD: [_add_response(int(ErrorCode.CONCURRENT_TRANSACTIONS), ("t", 0), ("t", 1)),
              _add_response(0, ("t", 0), ("t", 1))],
        END: [SimpleNamespace(error_code=int(ErrorCode.NOT_COORDINATOR)),
              SimpleNamespace(error_code=0)],
    })
    txn = _manager(client)

    async def main() -> None:
        assert await txn.init_producer_id() == (42, 3)
        await txn.add_partitions([("t", 1), ("t", 0)])
        await txn.add_partitions([("t", 0)])  # already in: no request
        assert txn.partitions == {("t", 0), ("t", 1)}
        await txn.end(committed=True)
        assert txn.partitions == set()

    asyncio.run(main())
    finds = [s for s in client.sent if s[1] == FIND_COORDINATOR]
    assert all(s[2]["key_type"] == 1 and s[2]["key"] == "tx-1" for s in finds)
    # NOT_COORDINATOR: found again (node 2 now), and the EndTxn retried there.
    assert len(finds) == 2
    (init,) = {s[1]: s for s in client.sent if s[1] == INIT}.values()
    assert init[2]["transactional_id"] == "tx-1" and init[2]["transaction_timeout"] == 30_000
    adds = [s for s in client.sent if s[1] == ADD]
    assert len(adds) == 2
    assert adds[0][2]["v3_and_below_topics"] == [{"name": "t", "partitions": [0, 1]}]
    assert (adds[0][2]["v3_and_below_producer_id"], adds[0][2]["v3_and_below_producer_epoch"]) \
        == (42, 3)
    ends = [s for s in client.sent if s[1] == END]
    assert [e[0] for e in ends] == [1, 2]
    assert ends[-1][2]["committed"] is True and ends[-1][2]["producer_id"] == 42


def test_fencing_is_raised_not_retried() -> None:
    client = FakeClient({
        INIT: [SimpleNamespace(error_code=0, producer_id=42, producer_epoch=3)],
        ADD: [_add_response(int(ErrorCode.PRODUCER_FENCED), ("t", 0))],
        END: [SimpleNamespace(error_code=int(ErrorCode.INVALID_TXN_STATE))],
    })
    txn = _manager(client)

    async def main() -> None:
        await txn.init_producer_id()
        with pytest.raises(KafkaClientError) as info:
            await txn.add_partitions([("t", 0)])
        assert info.value.error_code == ErrorCode.PRODUCER_FENCED
        assert txn.partitions == set()
        with pytest.raises(KafkaClientError) as info:
            await txn.end(committed=False)
        assert info.value.error_code == ErrorCode.INVALID_TXN_STATE

    asyncio.run(main())
    assert len([s for s in client.sent if s[1] == ADD]) == 1


@pytest.mark.parametrize("transactional", [True, False])
def test_batches_of_a_transactional_producer(transactional: bool) -> None:
    batch = ProducerBatch("t", 0, CompressionType.NONE, 0.0, transactional)
    batch.append(1, None, b"v", [], 70, None, None)
    data = bytes(batch.close(42, 3, 0))
    (header,) = iter_batch_headers(data)
    assert header.is_transactional is transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 0)
    header.ensure_valid(memoryview(data))  # the CRC covers the attributes


def test_a_transactional_producer_needs_idempotence_and_a_transaction() -> None:
    from klog.client.producer import Producer

    with pytest.raises(ValueError, match="transactional_id requires idempotence"):
        Producer("127.0.0.1:1", transactional_id="x", acks=1)

    async def main() -> None:
        producer = Producer("127.0.0.1:1", transactional_id="x")
        with pytest.raises(KafkaClientError, match="begin_transaction"):
            await producer.send("t", b"v", partition=0)
        with pytest.raises(KafkaClientError, match="uninitialized"):
            producer.begin_transaction()

    asyncio.run(main())


def test_a_transactional_producers_requests_name_its_transactional_id(tmp_path: Any) -> None:
    """Kafka's producer puts its transactional id in every Produce request: the leader
    authorizes it and verifies the transaction with its coordinator (KIP-890), and refuses
    transactional records without one (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    from klog.client.producer import Producer
    from tests.daemon.wire import InProcessBroker

    broker = InProcessBroker(tmp_path).start()
    rm = broker.broker.replica_manager
    produce = rm.produce
    named: list[str | None] = []

    async def spy(entries: Any, acks: int, timeout_ms: int, transactional_id: str | None = None,
                  abortable: bool = False) -> Any:
        named.append(transactional_id)
        return await produce(entries, acks, timeout_ms, transactional_id, abortable)

    rm.produce = spy  # type: ignore[method-assign]

    async def main() -> None:
        async with Producer(f"127.0.0.1:{broker.port}", transactional_id="tx-named") as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send_and_wait("named", b"v", partition=0)
            await p.commit_transaction()

    try:
        asyncio.run(main())
    finally:
        broker.stop()
    assert named and set(named) == {"tx-named"}
