"""`klog transactions` and `klog perf produce --transactional-id` against a real in-process
klog broker: the producer state of partitions written by klog's idempotent producer, by
klog's transactional producer, and by a transactional batch no coordinator knows (as a
producer that died mid-transaction and whose id expired leaves it: a hanging transaction),
found and aborted; and the one-line refusals."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.protocol.records.v2 import BatchBuilder
from klog.storage.validator import AppendOrigin
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
        # Partition 1 of "t": two plain records, then a transaction that never ends (offset 2).
        builder = BatchBuilder()
        builder.append(OLD_TS, None, b"a")
        builder.append(OLD_TS, None, b"b")
        txn = BatchBuilder(producer_id=OPEN_PID, producer_epoch=OPEN_EPOCH, base_sequence=0,
                           is_transactional=True)
        txn.append(OLD_TS, None, b"in-txn")
        rm = b.broker.replica_manager
        for batch in (builder.build(), txn.build()):
            result = b.call(lambda batch=batch: rm.append_records({("t", 1): batch}, 1,
                                                                 origin=AppendOrigin.COORDINATOR))
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


def _offsets(broker: InProcessBroker, tp: tuple[str, int]) -> tuple[int, int]:
    """(last stable offset, high watermark) of ``tp``."""
    from klog.client.admin import AdminClient

    async def main() -> tuple[int, int]:
        async with AdminClient(f"127.0.0.1:{broker.port}") as admin:
            lso = await admin.list_offsets({tp: "latest"}, isolation_level=1)
            hw = await admin.list_offsets({tp: "latest"})
            return lso[tp].offset, hw[tp].offset

    return asyncio.run(main())


def test_list_describe_find_hanging_and_abort(broker: InProcessBroker) -> None:
    from klog.client.admin import AdminClient, NewTopic
    from klog.client.producer import Producer

    bs = f"127.0.0.1:{broker.port}"

    async def open_transaction() -> Producer:
        async with AdminClient(bs) as admin:
            await admin.create_topics([NewTopic("tx", 1, 1)])
        producer = Producer(bs, transactional_id="cli-tx", transaction_timeout_ms=600_000)
        await producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            await producer.send("tx", b"r%d" % i, partition=0)
        await producer.flush()
        return producer

    loop = asyncio.new_event_loop()
    try:
        producer = loop.run_until_complete(open_transaction())
        code, out, err = klog(broker, "transactions", "list", "--json")
        assert code == 0, err
        (listed,) = [t for t in json.loads(out) if t["transactional_id"] == "cli-tx"]
        assert listed["coordinator"] == 0 and listed["state"] == "Ongoing"
        pid = listed["producer_id"]
        code, out, err = klog(broker, "transactions", "list")
        assert out.splitlines()[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                               "TransactionState"]
        assert ["cli-tx", "0", str(pid), "Ongoing"] in [r.split() for r in out.splitlines()]

        code, out, err = klog(broker, "transactions", "describe", "--transactional-id", "cli-tx")
        assert code == 0, err
        header, row = [line.split() for line in out.splitlines()]
        assert header == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                          "TransactionState", "TransactionTimeoutMs",
                          "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                          "TopicPartitions"]
        assert row[:6] == ["0", "cli-tx", str(pid), "0", "Ongoing", "600000"]
        assert int(row[6]) > 0 and int(row[7]) >= 0 and row[8] == "tx-0"
        code, _, err = klog(broker, "transactions", "describe", "--transactional-id", "nope")
        assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err
        assert len(err.strip().splitlines()) == 1

        code, out, _ = klog(broker, "transactions", "describe-producers", "--topic", "tx",
                            "--partition", "0", "--json")
        assert [(p["producer_id"], p["current_transaction_start_offset"])
                for p in json.loads(out)] == [(pid, 0)]

        # Every open transaction is older than 0 minutes; only t-1's has no coordinator
        # (the coordinator still holds tx-0 in cli-tx's transaction).
        code, out, err = klog(broker, "transactions", "find-hanging", "--broker-id", "0",
                              "--max-transaction-timeout", "0", "--json")
        assert code == 0, err
        (hanging,) = json.loads(out)
        assert {k: hanging[k] for k in ("topic", "partition", "producer_id", "producer_epoch",
                                        "coordinator_epoch", "start_offset",
                                        "last_timestamp")} \
            == {"topic": "t", "partition": 1, "producer_id": OPEN_PID,
                "producer_epoch": OPEN_EPOCH, "coordinator_epoch": -1, "start_offset": 2,
                "last_timestamp": OLD_TS}
        assert hanging["duration_min"] > 0

        # The hanging transaction holds t-1's last stable offset back until it is aborted.
        assert _offsets(broker, ("t", 1)) == (2, 3)
        code, out, err = klog(broker, "transactions", "abort", "--topic", "t", "--partition",
                              "1", "--start-offset", "2")
        assert code == 0, err
        assert f"producer {OPEN_PID}" in err
        assert _offsets(broker, ("t", 1)) == (4, 4)  # the ABORT marker at offset 3
        code, out, _ = klog(broker, "transactions", "find-hanging", "--broker-id", "0",
                            "--max-transaction-timeout", "0", "--json")
        assert json.loads(out) == []

        loop.run_until_complete(producer.commit_transaction())
        code, out, _ = klog(broker, "transactions", "describe", "--transactional-id",
                            "cli-tx", "--json")
        described = json.loads(out)
        assert described["state"] == "CompleteCommit"
        assert described["topic_partitions"] == []  # markers written: nothing pending
        assert _offsets(broker, ("tx", 0)) == (4, 4)  # 3 records and the COMMIT marker
        loop.run_until_complete(producer.close())
    finally:
        loop.close()


def test_list_with_a_duration_filter(broker: InProcessBroker) -> None:
    """``--duration-filter MS`` (kafka-transactions.sh list, KIP-994: ListTransactions v1):
    only the ids whose transaction has run longer than MS; < 0, all. As Kafka's
    coordinator compares now with the start time of every id, an id with no transaction
    running (start time -1) is listed whatever the filter."""
    from klog.client.admin import AdminClient, NewTopic
    from klog.client.producer import Producer

    bs = f"127.0.0.1:{broker.port}"

    async def setup() -> Producer:
        async with AdminClient(bs) as admin:
            await admin.create_topics([NewTopic("dur", 1, 1)])
        idle = Producer(bs, transactional_id="dur-idle")
        await idle.init_transactions()
        await idle.close()
        running = Producer(bs, transactional_id="dur-open", transaction_timeout_ms=600_000)
        await running.init_transactions()
        running.begin_transaction()
        await running.send("dur", b"x", partition=0)
        await running.flush()
        return running

    def listed(*args: str) -> dict[str, str]:
        code, out, err = klog(broker, "transactions", "list", *args, "--json")
        assert code == 0, err
        return {t["transactional_id"]: t["state"] for t in json.loads(out)
                if t["transactional_id"].startswith("dur-")}

    loop = asyncio.new_event_loop()
    try:
        running = loop.run_until_complete(setup())
        both = {"dur-idle": "Empty", "dur-open": "Ongoing"}
        assert listed() == both
        time.sleep(0.05)
        assert listed("--duration-filter", "10") == both
        assert listed("--duration-filter", "3600000") == {"dur-idle": "Empty"}
        assert listed("--duration-filter", "-1") == both
        code, out, err = klog(broker, "transactions", "list", "--duration-filter", "3600000")
        assert code == 0, err
        rows = [line.split() for line in out.splitlines()]
        assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        names = {row[0] for row in rows[1:]}
        assert "dur-idle" in names and "dur-open" not in names
        code, out, err = klog(broker, "transactions", "list", "--duration-filter", "soon")
        assert code != 0 and out == ""
        loop.run_until_complete(running.abort_transaction())
        loop.run_until_complete(running.close())
    finally:
        loop.close()


def test_perf_produce_in_transactions(broker: InProcessBroker) -> None:
    code, out, err = klog(broker, "perf", "produce", "--topic", "perf-tx", "--num-records",
                          "3000", "--record-size", "100", "--transactional-id", "perf-tx",
                          "--transaction-duration-ms", "20", "--json", "-X",
                          "linger.ms=1")
    assert code == 0, err
    result = json.loads(out)
    assert result["errors"] == 0 and result["records"] == 3000
    commits = result["transactions"]
    assert commits >= 1 and result["commit_max_ms"] >= result["commit_p50_ms"] > 0
    # Every record committed: one COMMIT marker per transaction after them, and nothing
    # left open (the last stable offset is the high watermark).
    assert _offsets(broker, ("perf-tx", 0)) == (3000 + commits, 3000 + commits)
    code, out, _ = klog(broker, "perf", "produce", "--topic", "perf-tx", "--num-records",
                        "10", "--record-size", "10", "--transactional-id", "perf-tx")
    assert code == 0
    assert "transactions committed, commit latency" in out.splitlines()[-1]
