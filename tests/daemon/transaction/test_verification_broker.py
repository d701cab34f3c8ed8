"""KIP-890 part 1 on a real standalone broker (in-process, real sockets): the coordinator
is this broker, so the leader asks it in-process. A late transactional write -- a batch of
a transaction already aborted, as a hung or zombie producer sends it -- is refused and
leaves the last stable offset where it was; a transactional offset commit outside the
transaction likewise (TRANSACTION_ABORTABLE from TxnOffsetCommit v4); and
``transaction.partition.verification.enable`` is honoured when changed at run time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from klog.protocol.errors import ErrorCode
from tests.daemon.transaction.raw import RawTransaction, find_coordinator, offsets, wait_for_state
from tests.daemon.wire import InProcessBroker, WireClient

pytestmark = pytest.mark.timeout(120)

NOT_ADDED = "Partition was not added to the transaction"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = InProcessBroker(tmp_path, {"num.partitions": "2"}).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def client(broker: InProcessBroker) -> Iterator[WireClient]:
    with broker.connect() as c:
        c.create_topic("t")
        yield c


def test_a_late_write_after_an_abort_is_refused_and_the_lso_moves_on(
        client: WireClient) -> None:
    assert find_coordinator(client, "tx") == 0
    txn = RawTransaction(client, "tx")
    txn.init()
    # Not added yet: refused (the well-behaved client adds first).
    early = txn.produce(client, "t", 0, b"early")
    assert (early.error_code, early.error_message) == (ErrorCode.INVALID_TXN_STATE, NOT_ADDED)
    txn.add([("t", 0)])
    assert txn.produce(client, "t", 0, b"in").error_code == 0
    assert txn.produce(client, "t", 0, b"in-2").error_code == 0  # ongoing: no question
    assert offsets(client, "t", 0) == (2, 0)  # the open transaction holds the LSO
    txn.end(commit=False)
    wait_for_state(client, "tx", "CompleteAbort")
    assert offsets(client, "t", 0) == (3, 3)
    # The zombie's late batches: to the aborted transaction's partition and to another.
    for partition in (0, 1):
        late = txn.produce(client, "t", partition, b"late")
        assert (late.error_code, late.error_message) == (ErrorCode.INVALID_TXN_STATE,
                                                         NOT_ADDED)
    assert offsets(client, "t", 0) == (3, 3)
    assert offsets(client, "t", 1) == (0, 0)
    # The producer goes on with a new transaction as usual.
    txn.add([("t", 1)])
    assert txn.produce(client, "t", 1, b"next").error_code == 0
    txn.end(commit=True)
    wait_for_state(client, "tx", "CompleteCommit")
    assert offsets(client, "t", 1) == (2, 2)


@pytest.mark.parametrize("version, refused", [(3, ErrorCode.INVALID_TXN_STATE),
                                              (4, ErrorCode.TRANSACTION_ABORTABLE)])
def test_a_txn_offset_commit_outside_the_transaction_is_refused(
        client: WireClient, version: int, refused: ErrorCode) -> None:
    find_coordinator(client, "tx-offsets")
    group_coordinator = client.call(10, 3, {"key": "g", "key_type": 0})
    assert group_coordinator.error_code == 0
    txn = RawTransaction(client, "tx-offsets")
    txn.init()
    values = {"transactional_id": "tx-offsets", "group_id": "g",
              "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
              "generation_id": -1, "member_id": "", "group_instance_id": None,
              "topics": [{"name": "t", "partitions": [
                  {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                   "committed_metadata": ""}]}]}

    def commit() -> ErrorCode:
        response = client.call(28, version, values)
        return ErrorCode(response.topics[0].partitions[0].error_code)

    # No AddOffsetsToTxn: the group's offsets partition is not in the transaction.
    assert commit() is refused
    add = client.call(25, 3, {"transactional_id": "tx-offsets", "group_id": "g",
                              "producer_id": txn.producer_id,
                              "producer_epoch": txn.producer_epoch})
    assert add.error_code == 0
    assert commit() is ErrorCode.NONE
    txn.end(commit=True)


def test_verification_follows_the_dynamic_config(broker: InProcessBroker,
                                                 client: WireClient) -> None:
    """transaction.partition.verification.enable, cluster-wide and dynamic as in Kafka:
    switched off, a late write is appended (and its transaction holds the last stable
    offset, which is what KIP-890 prevents); switched on again, refused."""
    from klog.client.admin import AdminClient, AlterConfigOp, ConfigResource

    def verification(enabled: bool) -> None:
        async def alter() -> None:
            async with AdminClient(f"127.0.0.1:{broker.port}") as admin:
                errors = await admin.alter_configs({ConfigResource.of("broker", ""): [
                    AlterConfigOp("transaction.partition.verification.enable",
                                  str(enabled).lower())]})
                assert set(errors.values()) == {None}, errors

        asyncio.run(alter())
        assert broker.call(lambda: broker.broker.txn_verifier.enabled) is enabled

    find_coordinator(client, "tx-dyn")
    txn = RawTransaction(client, "tx-dyn")
    txn.init()
    verification(False)
    assert txn.produce(client, "t", 0, b"unverified").error_code == 0
    assert offsets(client, "t", 0) == (1, 0)  # a transaction nobody will end
    verification(True)
    late = txn.produce(client, "t", 1, b"refused")
    assert late.error_code == ErrorCode.INVALID_TXN_STATE
    assert offsets(client, "t", 1) == (0, 0)
