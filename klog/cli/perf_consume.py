"""``klog perf consume``: consumer throughput, like kafka-consumer-perf-test.

Formatting only: the measurement is klog.client.consumer.measure_consume. This module
holds the one command; the ``perf`` command group (klog/cli/perf.py, with ``perf
produce``) adds it with ``register(perf_app)``.
"""

from __future__ import annotations

import os
from typing import Any

import typer

from klog.cli import console
from klog.cli.consume import read_properties

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def perf_consume(
    topic: str = typer.Option(..., "--topic", "-t", help="The topic to read."),
    messages: int = typer.Option(
        ..., "--messages", "--num-records", "-n", min=1,
        help="How many records to read (from the beginning of the partitions)."),
    bootstrap_server: str = typer.Option(
        None, "--bootstrap-server", "-b",
        help="host:port[,host:port...]; default $KLOG_BOOTSTRAP_SERVER or 127.0.0.1:9092.",
    ),
    partition: list[int] = typer.Option(
        [], "--partition", "-p", help="Read only this partition; may be repeated."),
    fetch_max_bytes: int = typer.Option(
        50 * 1024 * 1024, "--fetch-max-bytes", min=1, help="fetch.max.bytes."),
    max_partition_fetch_bytes: int = typer.Option(
        1024 * 1024, "--max-partition-fetch-bytes", min=1,
        help="max.partition.fetch.bytes."),
    timeout: float = typer.Option(
        10.0, "--timeout", min=0,
        help="Give up after this many seconds without a record."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    consumer_config_file: str | None = typer.Option(
        None, "--consumer.config",
        help="A file of consumer properties (Kafka's names), security settings included."),
) -> None:
    """Measure how fast klog's consumer reads records (kafka-consumer-perf-test)."""
    import asyncio

    from klog.client.consumer import consumer_config, measure_consume
    from klog.client.errors import KafkaClientError
    from klog.protocol.errors import KafkaError

    bootstrap = bootstrap_server or os.environ.get("KLOG_BOOTSTRAP_SERVER") or DEFAULT_BOOTSTRAP
    options: dict[str, Any] = {"request_timeout_ms": 10_000}
    if consumer_config_file is not None:
        try:
            options.update(consumer_config(read_properties(consumer_config_file)))
        except ValueError as exc:
            console.fail(f"--consumer.config {consumer_config_file}: {exc}", console.EXIT_USAGE)
    options.update(fetch_max_bytes=fetch_max_bytes,
                   max_partition_fetch_bytes=max_partition_fetch_bytes)
    try:
        result = asyncio.run(measure_consume(
            bootstrap, topic, messages, partitions=partition or None, idle_timeout=timeout,
            **options))
    except (KafkaClientError, KafkaError) as exc:
        console.fail(str(exc))
    if json_out:
        console.emit_json({"topic": topic, **result})
        return
    console.line(
        f"{int(result['records'])} records, {result['mb']:.2f} MB in {result['seconds']:.2f} s: "
        f"{result['records_per_sec']:.1f} records/sec, {result['mb_per_sec']:.2f} MB/sec")
    if result["records"] < messages:
        console.warn(f"only {int(result['records'])} of {messages} records came within "
                     f"{timeout:g} s of the last one")


def register(perf_app: typer.Typer) -> None:
    """Add ``consume`` to the ``perf`` command group."""
    perf_app.command("consume")(perf_consume)
