"""`klog transactions` against a real in-process klog broker: the producer state of
partitions written by klog's idempotent producer and by a transactional batch left open
(as a producer that died mid-transaction leaves it), and the one-line refusals. What needs
the transaction coordinator (list, describe, an abort that writes its marker) is tested
in tests/tools/test_transactions.py over a fake admin client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.protocol.records.v2 import BatchBuilder
from tests.daemon.wire import InProcessBroker

pytestmark = pytest.mark.timeout(90)

runner = CliRunner()
OLD_TS = 1_700_000_000_000  # long before now: an open transaction this old is hanging
OPEN_PID, OPEN_EPOCH = 777, 2


def klog(broker: InProcessBroker, *args: str) -> tuple[int, str, str]:
    env = {"COLUMNS": "250", "KLOG_BOOTSTRAP_SERVER": f"127.0.0.1:{broker.port}"}
    result = runner.invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    from klog.client.admin import AdminClient, NewTopic
    from klog.client.producer import Producer

    b = InProcessBroker(Path(tmp_path_factory.mktemp("txn-cli"))).start()
    bs = f"127.0.0.1:{b.port}"

    async def setup() -> None:
        async with AdminClient(bs) as admin:
            await admin.create_topics([NewTopic("t", 2, 1)])
        async with Producer(bs, enable_idempotence=True) as producer:
            for i in range(5):
                await producer.send("t", value=b"v%d" % i, partition=0)
            await producer.flush()

    try:
        asyncio.run(setup())
        # Partition 1: two plain records, then a transaction that never ends (offset 2).
        builder = BatchBuilder()
        builder.append(OLD_TS, None, b"a")
        builder.append(OLD_TS, None, b"b")
        txn = BatchBuilder(producer_id=OPEN_PID, producer_epoch=OPEN_EPOCH, base_sequence=0,
                           is_transactional=True)
        txn.append(OLD_TS, None, b"in-txn")
        rm = b.broker.replica_manager
        for batch in (builder.build(), txn.build()):
            result = b.call(lambda batch=batch: rm.append_records({("t", 1): batch}, 1,
                                                                 origin="coordinator"))
            assert result[("t", 1)].error_code == 0
        yield b
    finally:
        b.stop()


HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
           "LastTimestamp", "CurrentTransactionStartOffset"]


def test_describe_producers_of_an_idempotent_producer(broker: InProcessBroker) -> None:
    code, out, err = klog(broker, "transactions", "describe-producers", "--topic", "t",
                          "--partition", "0")
    assert code == 0, err
    header, row = [line.split() for line in out.splitlines()]
    assert header == HEADERS
    pid, epoch, coordinator_epoch, last_seq, last_ts, start = row
    assert int(pid) >= 0 and epoch == "0" and coordinator_epoch == "-1"
    assert last_seq == "4" and int(last_ts) > OLD_TS and start == "None"
    code, out, _ = klog(broker, "transactions", "describe-producers", "--topic", "t",
                        "--partition", "0", "--json")
    (state,) = json.loads(out)
    assert state["producer_id"] == int(pid) and state["last_sequence"] == 4
    assert state["current_transaction_start_offset"] is None


def test_describe_producers_shows_an_open_transaction(broker: InProcessBroker) -> None:
    code, out, err = klog(broker, "transactions", "describe-producers", "--topic", "t",
                          "--partition", "1", "--broker-id", "0", "--json")
    assert code == 0, err
    assert json.loads(out) == [{
        "producer_id": OPEN_PID, "producer_epoch": OPEN_EPOCH, "latest_coordinator_epoch": -1,
        "last_sequence": 0, "last_timestamp": OLD_TS, "current_transaction_start_offset": 2}]


def test_describe_producers_of_a_partition_that_does_not_exist(
        broker: InProcessBroker) -> None:
    code, out, err = klog(broker, "transactions", "describe-producers", "--topic", "t",
                          "--partition", "9")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "t-9" in err and "UNKNOWN_TOPIC_OR_PARTITION" in err


def test_abort_needs_a_transaction_starting_at_the_offset(broker: InProcessBroker) -> None:
    code, out, err = klog(broker, "transactions", "abort", "--topic", "t", "--partition", "1",
                          "--start-offset", "1")
    assert code == 1 and out == ""
    assert err.strip() == ("error: Could not find any open transactions starting at offset 1 "
                           "on partition t-1")


def test_find_hanging_limits_and_scope(broker: InProcessBroker) -> None:
    code, _, err = klog(broker, "transactions", "find-hanging")
    assert code == 1
    assert "requires either --topic or --broker-id" in err
    code, _, err = klog(broker, "transactions", "find-hanging", "--broker-id", "0",
                        "--partition", "1")
    assert code == 1 and "--partition argument requires --topic" in err
    # Within the timeout (an open transaction younger than 10^7 minutes): no candidate,
    # so no coordinator is asked; Kafka's header alone.
    code, out, err = klog(broker, "transactions", "find-hanging", "--broker-id", "0",
                          "--max-transaction-timeout", "10000000")
    assert code == 0, err
    assert out.split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                           "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)"]
