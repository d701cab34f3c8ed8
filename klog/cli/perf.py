"""``klog perf``: client throughput tests, like Kafka's kafka-producer-perf-test and
kafka-consumer-perf-test.

Formatting only: the measurements are klog.client.producer.measure_produce and
klog.client.consumer.measure_consume. ``perf produce`` lives here; ``perf consume`` lives in
klog/cli/perf_consume.py and joins the group in ``register``.
"""

from __future__ import annotations

import typer

from klog.cli import console

perf_app = console.command_group(
    "perf", "Measure producer and consumer throughput against a cluster.")


# ---------------------------------------------------------------------------------------
# perf produce


@perf_app.command("produce")
def perf_produce(
    topic: str = typer.Option(..., "--topic", "-t", help="The topic to write to."),
    num_records: int = typer.Option(
        ..., "--num-records", "-n", min=1, help="How many records to send."),
    record_size: int = typer.Option(
        ..., "--record-size", "-s", min=0, help="Each record's value size in bytes."),
    throughput: float = typer.Option(
        -1, "--throughput",
        help="Cap on records per second; -1 sends as fast as possible."),
    producer_prop: list[str] = typer.Option(
        [], "--producer-props", "--producer-prop", "-X",
        help="A producer property k=v with Kafka's name (acks=1, linger.ms=10, "
             "batch.size=...); repeat the flag for each."),
    producer_config_file: str | None = typer.Option(
        None, "--producer.config",
        help="A file of producer properties (Kafka's names), security settings included."),
    bootstrap_server: str = typer.Option(
        None, "--bootstrap-server", "-b",
        help="host:port[,host:port...]; default $KLOG_BOOTSTRAP_SERVER or 127.0.0.1:9092.",
    ),
    transactional_id: str | None = typer.Option(
        None, "--transactional-id",
        help="Send in transactions of this transactional id (kafka-producer-perf-test's "
             "flag): needs the brokers' transaction coordinator."),
    transaction_duration_ms: int = typer.Option(
        3000, "--transaction-duration-ms", min=1,
        help="With --transactional-id: commit each transaction once it has lasted this "
             "long (ms)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Send records as fast as allowed and report throughput and latency."""
    import asyncio

    from klog.cli.produce import bootstrap_from, producer_properties
    from klog.client.errors import KafkaClientError
    from klog.client.producer import measure_produce, producer_config

    if throughput == 0:
        console.fail("--throughput must be positive, or -1 for no limit", console.EXIT_USAGE)
    try:
        config = producer_config(producer_properties(producer_config_file, producer_prop,
                                                     "--producer-props"))
    except ValueError as exc:
        console.fail(str(exc), console.EXIT_USAGE)
    if transactional_id is not None:
        config["transactional_id"] = transactional_id

    def window(stats: dict[str, float]) -> None:
        console.line(
            f"{int(stats['records'])} records sent, {stats['records_per_sec']:.1f} "
            f"records/sec ({stats['mb_per_sec']:.2f} MB/sec), "
            f"{stats['avg_latency_ms']:.1f} ms avg latency, "
            f"{stats['max_latency_ms']:.1f} ms max latency.")

    try:
        result = asyncio.run(measure_produce(
            bootstrap_from(bootstrap_server), topic, num_records, record_size,
            throughput=throughput, report=None if json_out else window,
            transaction_duration_ms=transaction_duration_ms, **config))
    except (KafkaClientError, ValueError) as exc:
        console.fail(str(exc))
    if json_out:
        console.emit_json({"topic": topic, **result})
    else:
        # kafka-producer-perf-test's summary line.
        console.line(
            f"{int(result['records'])} records sent, {result['records_per_sec']:.1f} "
            f"records/sec ({result['mb_per_sec']:.2f} MB/sec), "
            f"{result['avg_latency_ms']:.2f} ms avg latency, "
            f"{result['max_latency_ms']:.2f} ms max latency, "
            f"{result['p50_ms']:.0f} ms 50th, {result['p95_ms']:.0f} ms 95th, "
            f"{result['p99_ms']:.0f} ms 99th, {result['p999_ms']:.0f} ms 99.9th.")
        if transactional_id is not None:
            console.line(
                f"{int(result['transactions'])} transactions committed, commit latency "
                f"{result['commit_p50_ms']:.1f} ms 50th, {result['commit_p99_ms']:.1f} ms "
                f"99th, {result['commit_max_ms']:.1f} ms max.")
    if result["errors"]:
        console.fail(f"{int(result['errors'])} of {num_records} records were not written")


# ---------------------------------------------------------------------------------------
# perf consume: klog/cli/perf_consume.py


def register(app: typer.Typer) -> None:
    from klog.cli import perf_consume

    perf_consume.register(perf_app)
    app.add_typer(perf_app, name="perf")
