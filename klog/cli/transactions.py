"""``klog transactions list|describe|describe-producers|abort|find-hanging``: Kafka's
kafka-transactions.sh, with its column names and one row per item.

Formatting only: the requests are klog.client.admin's (``list_transactions``,
``describe_transactions``, ``describe_producers``, ``abort_transaction``), the searches
klog.tools.transactions' (``abort_spec``, ``find_hanging``). As Kafka's tool prints them,
an absent start time, duration or transaction start offset shows as ``None``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from klog.cli import console
from klog.cli.topic import (
    bootstrap_option,
    command_config_option,
    fail,
    json_option,
    print_table,
    table,
    text,
    with_admin,
)

if TYPE_CHECKING:
    from klog.client.admin import AdminClient, ProducerState

transactions_app = console.command_group(
    "transactions",
    "List, describe and abort transactions; find hanging ones (kafka-transactions.sh).")


def _none(value: int | None) -> str:
    return "None" if value is None or value < 0 else str(value)


@transactions_app.command("list")
def list_(
    duration_filter: int | None = typer.Option(
        None, "--duration-filter", metavar="MS",
        help="Only transactions running longer than this many milliseconds (< 0: all); "
             "needs ListTransactions v1 (Kafka 3.8+, klog)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """List the transactional ids every broker coordinates."""
    duration_ms = -1 if duration_filter is None or duration_filter < 0 else duration_filter
    listed = with_admin(bootstrap_server,
                        lambda admin: admin.list_transactions(duration_filter_ms=duration_ms),
                        command_config=command_config)
    rows = [{"transactional_id": t.transactional_id, "coordinator": t.coordinator,
             "producer_id": t.producer_id, "state": t.state} for t in listed]
    if json_out:
        console.emit_json(rows)
        return
    t = table("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
    for row in rows:
        t.add_row(text(row["transactional_id"]), str(row["coordinator"]),
                  str(row["producer_id"]), text(row["state"]))
    print_table(t)


@transactions_app.command("describe")
def describe(
    transactional_id: str = typer.Option(..., "--transactional-id", help="Transactional id."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """The state of a transactional id, from its coordinator."""
    from klog.client.errors import KafkaClientError

    found = with_admin(bootstrap_server,
                       lambda admin: admin.describe_transactions([transactional_id]),
                       command_config=command_config)
    d = found[transactional_id]
    if isinstance(d, KafkaClientError):
        fail(f"Failed to describe transaction state of transactional-id "
             f"`{transactional_id}`: {d}")
    now = int(time.time() * 1000)
    duration = None if d.start_time_ms is None else now - d.start_time_ms
    partitions = [f"{topic}-{p}" for topic, p in d.partitions]
    if json_out:
        console.emit_json({
            "coordinator_id": d.coordinator, "transactional_id": d.transactional_id,
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
            "state": d.state, "timeout_ms": d.timeout_ms,
            "current_transaction_start_time_ms": d.start_time_ms,
            "transaction_duration_ms": duration,
            "topic_partitions": [{"topic": topic, "partition": p}
                                 for topic, p in d.partitions]})
        return
    t = table("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
              "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
              "TransactionDurationMs", "TopicPartitions")
    t.add_row(str(d.coordinator), text(d.transactional_id), str(d.producer_id),
              str(d.producer_epoch), text(d.state), str(d.timeout_ms),
              _none(d.start_time_ms), _none(duration), text(",".join(partitions)))
    print_table(t)


def _producer_json(p: ProducerState) -> dict[str, Any]:
    return {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
            "latest_coordinator_epoch": p.coordinator_epoch,
            "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
            "current_transaction_start_offset": None if p.current_transaction_start_offset < 0
            else p.current_transaction_start_offset}


@transactions_app.command("describe-producers")
def describe_producers(
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    partition: int = typer.Option(..., "--partition", help="Partition number."),
    broker_id: int | None = typer.Option(
        None, "--broker-id", help="Describe the producer state of this broker's replica "
        "(default: the leader's)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """The active producers of a partition: ids, epochs, sequences, open transactions."""
    from klog.client.errors import KafkaClientError

    tp = (topic, partition)
    found = with_admin(bootstrap_server,
                       lambda admin: admin.describe_producers([tp], broker_id=broker_id),
                       command_config=command_config)
    result = found.get(tp)
    if isinstance(result, KafkaClientError) or result is None:
        where = "leader" if broker_id is None else f"broker {broker_id}"
        fail(f"Failed to describe producers for partition {topic}-{partition} on {where}: "
             f"{result or 'no answer'}")
    if json_out:
        console.emit_json([_producer_json(p) for p in result])
        return
    t = table("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
              "LastTimestamp", "CurrentTransactionStartOffset")
    for p in result:
        t.add_row(str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                  str(p.last_sequence), str(p.last_timestamp),
                  _none(p.current_transaction_start_offset))
    print_table(t)


@transactions_app.command("abort")
def abort(
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    partition: int = typer.Option(..., "--partition", help="Partition number."),
    start_offset: int = typer.Option(
        ..., "--start-offset", help="Start offset of the transaction to abort."),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Abort a hanging transaction: an ABORT marker for the producer whose open transaction
    starts at --start-offset, written by the partition's leader."""
    from klog.tools.transactions import TransactionToolError, abort_spec

    async def body(admin: AdminClient) -> str:
        try:
            spec = await abort_spec(admin, (topic, partition), start_offset)
        except TransactionToolError as exc:
            fail(str(exc))
        from klog.client.errors import KafkaClientError

        try:
            await admin.abort_transaction((topic, partition), spec.producer_id,
                                          spec.producer_epoch, spec.coordinator_epoch)
        except KafkaClientError as exc:
            fail(f"Failed to abort transaction of producer {spec.producer_id} (epoch "
                 f"{spec.producer_epoch}) on {topic}-{partition}: {exc}")
        return (f"aborted the transaction of producer {spec.producer_id} (epoch "
                f"{spec.producer_epoch}) starting at offset {start_offset} of "
                f"{topic}-{partition}")

    console.info(with_admin(bootstrap_server, body, command_config=command_config))


@transactions_app.command("find-hanging")
def find_hanging(
    broker_id: int | None = typer.Option(
        None, "--broker-id", help="Search the partitions with a replica on this broker."),
    topic: str | None = typer.Option(None, "--topic", help="Search this topic only."),
    partition: int | None = typer.Option(
        None, "--partition", help="Search this partition of --topic only."),
    max_transaction_timeout: int = typer.Option(
        15, "--max-transaction-timeout",
        help="Transactions open longer than this (minutes; the brokers' "
        "transaction.max.timeout.ms) are candidates."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Open transactions that no coordinator will complete (Kafka's find-hanging)."""
    from klog.tools.transactions import (
        OpenTransaction,
        TransactionToolError,
        duration_minutes,
    )
    from klog.tools.transactions import find_hanging as search

    now = int(time.time() * 1000)

    async def body(admin: AdminClient) -> list[OpenTransaction]:
        try:
            return await search(admin, broker_id=broker_id, topic=topic, partition=partition,
                                max_transaction_timeout_ms=max_transaction_timeout * 60_000,
                                now_ms=now)
        except TransactionToolError as exc:
            fail(str(exc))

    hanging = with_admin(bootstrap_server, body, command_config=command_config)
    rows = [{"topic": h.topic, "partition": h.partition,
             "producer_id": h.producer.producer_id,
             "producer_epoch": h.producer.producer_epoch,
             "coordinator_epoch": h.producer.coordinator_epoch,
             "start_offset": h.producer.current_transaction_start_offset,
             "last_timestamp": h.producer.last_timestamp,
             "duration_min": duration_minutes(now, h.producer.last_timestamp)}
            for h in hanging]
    if json_out:
        console.emit_json(rows)
        return
    t = table("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
              "StartOffset", "LastTimestamp", "Duration(min)")
    for row in rows:
        t.add_row(text(row["topic"]), *(str(row[k]) for k in (
            "partition", "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
            "last_timestamp", "duration_min")))
    print_table(t)


def register(app: typer.Typer) -> None:
    app.add_typer(transactions_app)
