"""``klog produce TOPIC``: write lines from stdin or a file as records (kcat -P,
kafka-console-producer).

Formatting only: the producer is klog.client.producer's. Input is read as bytes, whatever is
available at a time (``read1``), so piped input goes fast and typed input is sent line by
line; each line (without its newline) is one record, split into key and value at the first
``--key-separator`` when one is given.
"""

from __future__ import annotations

import os
from typing import Any

import typer

from klog.cli import console
from klog.storage.properties import split_assignment

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def parse_assignments(items: list[str], what: str) -> list[tuple[str, str]]:
    """``k=v`` pairs (the value may be empty or contain ``=``); exits on a bad one."""
    pairs = []
    for item in items:
        try:
            pairs.append(split_assignment(item, strip_key=False))
        except ValueError:
            console.fail(f"{what} must look like key=value, not {item!r}", console.EXIT_USAGE)
    return pairs


def producer_properties(config_file: str | None, items: list[str], what: str
                        ) -> dict[str, str]:
    """Producer properties with Kafka's names: ``--producer.config`` FILE (Java properties
    syntax), then the ``k=v`` items on top."""
    properties: dict[str, str] = {}
    if config_file is not None:
        from klog.storage.properties import parse_properties

        try:
            with open(config_file, encoding="utf-8") as f:
                properties.update(parse_properties(f.read()))
        except OSError as exc:
            console.fail(f"cannot read {config_file}: {exc.strerror}", console.EXIT_USAGE)
    properties.update(parse_assignments(items, what))
    return properties


def bootstrap_from(option: str | None) -> str:
    return option or os.environ.get("KLOG_BOOTSTRAP_SERVER") or DEFAULT_BOOTSTRAP


def produce(
    topic: str = typer.Argument(..., help="The topic to write to."),
    bootstrap_server: str = typer.Option(
        None, "--bootstrap-server", "-b",
        help="host:port[,host:port...]; default $KLOG_BOOTSTRAP_SERVER or 127.0.0.1:9092.",
    ),
    file: str = typer.Option(
        None, "--file", "-f", help="Read lines from this file instead of stdin."),
    key_separator: str = typer.Option(
        None, "--key-separator", "-K",
        help="Split each line at the first occurrence: key before, value after (a line "
             "without it has no key)."),
    header: list[str] = typer.Option(
        [], "--header", "-H", help="A header k=v added to every record; may be repeated."),
    partition: int = typer.Option(
        None, "--partition", "-p", min=0,
        help="Write every record to this partition (default: by key, or sticky)."),
    compression: str = typer.Option(
        "none", "--compression", "-z", help="none, gzip, snappy, lz4 or zstd."),
    acks: str = typer.Option(
        "all", "--acks", help="all (-1), 1 or 0: acknowledgements to wait for."),
    producer_prop: list[str] = typer.Option(
        [], "--producer-property", "--producer-prop", "-X",
        help="A producer property k=v with Kafka's name (linger.ms=10); may be repeated."),
    producer_config_file: str | None = typer.Option(
        None, "--producer.config",
        help="A file of producer properties (Kafka's names), security settings included."),
    print_offsets: bool = typer.Option(
        False, "--print-offsets", "-v",
        help="Print topic, partition and offset of each record written."),
    json_out: bool = typer.Option(
        False, "--json", help="With --print-offsets: one JSON object per record."),
) -> None:
    """Write lines from stdin (or --file) to TOPIC, one record per line."""
    import asyncio

    from klog.client.errors import KafkaClientError
    from klog.client.producer import producer_config

    if compression not in CODECS:
        console.fail(f"--compression must be one of {', '.join(CODECS)}, not {compression!r}",
                     console.EXIT_USAGE)
    headers = [(k, v.encode()) for k, v in parse_assignments(header, "--header")]
    try:
        config = producer_config(producer_properties(producer_config_file, producer_prop,
                                                     "--producer-property"))
        config.setdefault("acks", producer_config({"acks": acks})["acks"])
    except ValueError as exc:
        console.fail(str(exc), console.EXIT_USAGE)
    config.setdefault("compression_type", None if compression == "none" else compression)
    import sys

    try:
        stream = open(file, "rb") if file is not None else sys.stdin.buffer  # noqa: SIM115
    except OSError as exc:
        console.fail(f"cannot read {file}: {exc.strerror}", console.EXIT_USAGE)
    separator = key_separator.encode() if key_separator else None
    try:
        sent, failed, first_error = asyncio.run(_produce(
            bootstrap_from(bootstrap_server), topic, stream, separator, headers, partition,
            config, print_offsets, json_out))
    except (KafkaClientError, ValueError) as exc:
        console.fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        if file is not None:
            stream.close()
    if failed:
        console.fail(f"{failed} of {sent} records were not written: {first_error}")


async def _produce(bootstrap: str, topic: str, stream: Any, separator: bytes | None,
                   headers: list[tuple[str, bytes]], partition: int | None,
                   config: dict[str, Any], print_offsets: bool, json_out: bool,
                   ) -> tuple[int, int, BaseException | None]:
    import asyncio

    from klog.client.producer import Producer

    loop = asyncio.get_running_loop()
    failures: list[BaseException] = []

    def delivered(metadata: Any, exc: BaseException | None) -> None:
        if exc is not None:
            failures.append(exc)
        elif json_out:
            console.emit_json({"topic": metadata.topic, "partition": metadata.partition,
                               "offset": metadata.offset, "timestamp": metadata.timestamp})
        else:
            console.line(f"{metadata.topic}\t{metadata.partition}\t{metadata.offset}")

    callback = delivered if print_offsets else _count_failure(failures)
    sent = 0
    async with Producer(bootstrap, client_id="klog-produce", **config) as producer:
        pending = b""
        while True:
            # A read in a thread keeps the producer's loop sending (after linger_ms) while
            # the next line is awaited, so typed lines go out as they are typed.
            # read1: what is there now (a typed line, a pipe's worth), up to 64 KiB.
            chunk = await loop.run_in_executor(None, stream.read1, 1 << 16)
            if not chunk:
                break
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                await _send_line(producer, topic, line, separator, headers, partition,
                                 callback)
                sent += 1
        if pending:
            await _send_line(producer, topic, pending, separator, headers, partition,
                             callback)
            sent += 1
        await producer.flush()
    return sent, len(failures), failures[0] if failures else None


def _count_failure(failures: list[BaseException]) -> Any:
    def callback(metadata: Any, exc: BaseException | None) -> None:
        if exc is not None:
            failures.append(exc)
    return callback


async def _send_line(producer: Any, topic: str, line: bytes, separator: bytes | None,
                     headers: list[tuple[str, bytes]], partition: int | None,
                     callback: Any) -> None:
    key = None
    if separator is not None:
        head, sep, tail = line.partition(separator)
        if sep:
            key, line = head, tail
    await producer.send(topic, line, key=key, headers=headers or None, partition=partition,
                        on_delivery=callback)


def register(app: typer.Typer) -> None:
    app.command("produce")(produce)
