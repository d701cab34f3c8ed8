"""``klog consume TOPIC``: print a topic's records (kcat -C / kafka-console-consumer).

Formatting only: positioning and reading are klog.client.consumer's (``seek_to_spec``,
``read_records``; with ``--group``, the group's subscription, assignment and commits).
Records go to stdout as bytes (keys and values are printed as they are, not re-encoded),
one ``--format`` expansion or one JSON object per record.

With ``--group G`` it consumes as a member of G, as kafka-console-consumer does: the group
assigns the partitions (and rebalances them between members), reading starts at the
group's committed offsets, else at the end (``--from-beginning`` or ``--offset
beginning``: at the beginning), and offsets are committed as it reads and when it stops.
Consumer properties take Kafka's names: ``-X k=v`` (``--consumer-property``) and
``--consumer.config FILE``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import typer

from klog.cli import console
from klog.storage.properties import split_assignment

if TYPE_CHECKING:
    from klog.client.consumer import OffsetSpec
    from klog.client.records import ConsumerRecord

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_FORMAT = "%s\\n"


def consume(
    topic: str = typer.Argument(..., help="The topic to read."),
    bootstrap_server: str = typer.Option(
        None, "--bootstrap-server", "-b",
        help="host:port[,host:port...]; default $KLOG_BOOTSTRAP_SERVER or 127.0.0.1:9092.",
    ),
    offset: str = typer.Option(
        "end", "--offset", "-o",
        help="Where to start: beginning, end, <offset>, @<timestamp ms> or -N (N before "
             "the end), for every partition read.",
    ),
    count: int | None = typer.Option(
        None, "--count", "-n", "--max-messages", min=1,
        help="Stop after this many records in all (kafka-console-consumer's --max-messages)."),
    partition: list[int] = typer.Option(
        [], "--partition", "-p", help="Read only this partition; may be repeated."),
    fmt: str = typer.Option(
        DEFAULT_FORMAT, "--format", "-f",
        help="Per-record format: %t topic, %p partition, %o offset, %k key, %s value, "
             "%T timestamp, %h headers, %K/%S key/value length, %% a percent sign; "
             "\\n and \\t escapes.",
    ),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per record instead of --format."),
    exit_at_end: bool = typer.Option(
        False, "--exit", "-e", help="Exit once every partition has reached its end."),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0,
        help="Exit after this many seconds without a record."),
    read_committed: bool = typer.Option(
        False, "--read-committed",
        help="Read only committed transactional records (isolation level read_committed).",
    ),
    isolation_level: str | None = typer.Option(
        None, "--isolation-level",
        help="read_committed or read_uncommitted (kafka-console-consumer's spelling of "
             "--read-committed)."),
    group: str | None = typer.Option(
        None, "--group", "-g",
        help="Consume as a member of this group: assigned partitions, committed offsets."),
    from_beginning: bool = typer.Option(
        False, "--from-beginning",
        help="Start at the beginning (with --group: where the group has no offset)."),
    consumer_property: list[str] = typer.Option(
        [], "--consumer-property", "-X",
        help="A consumer property k=v with Kafka's name (fetch.min.bytes=1024); may be "
             "repeated."),
    consumer_config_file: str | None = typer.Option(
        None, "--consumer.config",
        help="A file of consumer properties (Kafka's names), security settings included."),
) -> None:
    """Print records of TOPIC."""
    import asyncio

    from klog.client.consumer import consumer_config, parse_offset_spec

    bootstrap = bootstrap_server or os.environ.get("KLOG_BOOTSTRAP_SERVER") or DEFAULT_BOOTSTRAP
    if from_beginning:
        offset = "beginning"
    if isolation_level is not None:
        if isolation_level not in ("read_committed", "read_uncommitted"):
            console.fail(f"--isolation-level must be read_committed or read_uncommitted, "
                         f"not {isolation_level!r}", console.EXIT_USAGE)
        read_committed = read_committed or isolation_level == "read_committed"
    try:
        spec = parse_offset_spec(offset)
    except ValueError as exc:
        console.fail(str(exc), console.EXIT_USAGE)
    try:
        properties = read_properties(consumer_config_file)
        properties.update(_pairs(consumer_property))
        config = consumer_config(properties)
    except ValueError as exc:
        console.fail(str(exc), console.EXIT_USAGE)
    if group is not None:
        config["group_id"] = group
    template = None if json_out else _compile(fmt)
    if config.get("group_id") is not None:
        if partition:
            console.fail("--partition cannot be used with --group (the group assigns "
                         "the partitions)", console.EXIT_USAGE)
        if offset not in ("beginning", "end"):
            console.fail("with --group, --offset may only be beginning or end (where the "
                         "group has no committed offset)", console.EXIT_USAGE)
        config.setdefault("auto_offset_reset", "earliest" if offset == "beginning"
                          else "latest")
        runner = _consume_in_group(bootstrap, topic, config, count, template, exit_at_end,
                                   timeout, read_committed)
    else:
        runner = _consume(bootstrap, topic, spec, count, partition, template, exit_at_end,
                          timeout, read_committed, config)
    try:
        code = asyncio.run(runner)
    except KeyboardInterrupt:
        code = 0
    except BrokenPipeError:
        # A reader like `head` went away: stop quietly, as cat does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        code = 0
    if code:
        raise typer.Exit(code)


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        try:
            key, value = split_assignment(item)
        except ValueError:
            raise ValueError(f"--consumer-property {item!r} is not key=value") from None
        out[key] = value.strip()
    return out


def read_properties(path: str | None) -> dict[str, str]:
    """A --consumer.config file's properties (none without one); ValueError when it
    cannot be read."""
    if path is None:
        return {}
    from klog.storage.properties import parse_properties

    try:
        with open(path, encoding="utf-8") as f:
            return dict(parse_properties(f.read()))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None


def _options(config: dict[str, Any], read_committed: bool) -> dict[str, Any]:
    options: dict[str, Any] = {"client_id": "klog-consume", "request_timeout_ms": 10_000,
                               **config}
    if read_committed:
        options["isolation_level"] = "read_committed"
    return options


async def _consume(bootstrap: str, topic: str, spec: OffsetSpec, count: int | None,
                   partitions: list[int], template: list[object] | None, exit_at_end: bool,
                   timeout: float | None, read_committed: bool,
                   config: dict[str, Any] | None = None) -> int:
    import sys

    from klog.client.consumer import Consumer, TopicPartition, read_records, seek_to_spec
    from klog.client.errors import KafkaClientError
    from klog.protocol.errors import KafkaError

    out = sys.stdout.buffer
    options = _options(config or {}, read_committed)
    options["auto_offset_reset"] = "none"  # positions come from --offset
    try:
        consumer = Consumer(bootstrap, **options)
    except (TypeError, ValueError) as exc:
        console.fail(str(exc), console.EXIT_USAGE)
    try:
        try:
            await consumer.start()
            known = await consumer.partitions_for_topic(topic)
        except KafkaClientError as exc:
            console.fail(f"cannot reach {bootstrap}: {exc}")
        if known is None:
            console.fail(f"topic {topic!r} does not exist")
        missing = sorted(set(partitions) - set(known))
        if missing:
            console.fail(f"topic {topic!r} has no partition {missing[0]} "
                         f"(it has {len(known)})")
        tps = [TopicPartition(topic, p) for p in (partitions or known)]
        tps = list(dict.fromkeys(tps))
        consumer.assign(tps)
        try:
            await seek_to_spec(consumer, tps, spec)
            async for records in read_records(consumer, tps, count=count,
                                              exit_at_end=exit_at_end, idle_timeout=timeout):
                if template is None:
                    for record in records:
                        out.write(_json_line(record))
                else:
                    out.write(b"".join(_render(template, r) for r in records))
                out.flush()
        except (KafkaClientError, KafkaError) as exc:
            console.fail(str(exc))
    finally:
        await consumer.close()
    return 0


async def _consume_in_group(bootstrap: str, topic: str, config: dict[str, Any],
                            count: int | None, template: list[object] | None,
                            exit_at_end: bool, timeout: float | None,
                            read_committed: bool) -> int:
    """Consume as a group member (kafka-console-consumer --group): subscribe, print what
    the assignment yields, commit as it goes (auto commit) and on the way out."""
    import sys
    import time

    from klog.client.consumer import Consumer
    from klog.client.errors import KafkaClientError
    from klog.protocol.errors import KafkaError

    out = sys.stdout.buffer
    try:
        consumer = Consumer(bootstrap, **_options(config, read_committed))
    except (TypeError, ValueError) as exc:
        console.fail(str(exc), console.EXIT_USAGE)
    try:
        try:
            await consumer.start()
            if await consumer.partitions_for_topic(topic) is None:
                console.fail(f"topic {topic!r} does not exist")
            consumer.subscribe([topic])
            printed = 0
            last_record = time.monotonic()
            while count is None or printed < count:
                limit = 10_000 if count is None else count - printed
                batch = await consumer.getmany(timeout_ms=500, max_records=limit)
                if not batch:
                    if timeout is not None and time.monotonic() - last_record >= timeout:
                        break
                    if exit_at_end and await _at_end(consumer):
                        break
                    continue
                last_record = time.monotonic()
                for _tp, records in sorted(batch.items()):
                    if template is None:
                        out.write(b"".join(_json_line(r) for r in records))
                    else:
                        out.write(b"".join(_render(template, r) for r in records))
                    printed += len(records)
                out.flush()
        except (KafkaClientError, KafkaError) as exc:
            console.fail(str(exc))
    finally:
        await consumer.close()  # commits the positions reached (auto commit)
    return 0


async def _at_end(consumer: Any) -> bool:
    """Every partition assigned to this member has been read to its end."""
    assigned = sorted(consumer.assignment())
    if not assigned:
        return False
    ends = await consumer.end_offsets(assigned)
    for tp in assigned:
        if await consumer.position(tp) < ends[tp]:
            return False
    return True


# --- formatting ---------------------------------------------------------------------------

_FIELDS = {"t", "p", "o", "k", "s", "T", "h", "K", "S"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}


def _compile(fmt: str) -> list[object]:
    """The format as literal byte chunks and one-letter field names."""
    parts: list[object] = []
    literal: list[str] = []
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if ch == "\\" and nxt in _ESCAPES:
            literal.append(_ESCAPES[nxt])
            i += 2
        elif ch == "%" and nxt == "%":
            literal.append("%")
            i += 2
        elif ch == "%" and nxt in _FIELDS:
            if literal:
                parts.append("".join(literal).encode())
                literal = []
            parts.append(nxt)
            i += 2
        elif ch == "%":
            console.fail(f"unknown format field %{nxt} in {fmt!r}", console.EXIT_USAGE)
        else:
            literal.append(ch)
            i += 1
    if literal:
        parts.append("".join(literal).encode())
    return parts


def _render(template: list[object], r: ConsumerRecord) -> bytes:
    chunks: list[bytes] = []
    for part in template:
        if isinstance(part, bytes):
            chunks.append(part)
        elif part == "s":
            chunks.append(r.value or b"")
        elif part == "k":
            chunks.append(r.key or b"")
        elif part == "o":
            chunks.append(str(r.offset).encode())
        elif part == "p":
            chunks.append(str(r.partition).encode())
        elif part == "t":
            chunks.append(r.topic.encode())
        elif part == "T":
            chunks.append(str(r.timestamp).encode())
        elif part == "K":
            chunks.append(str(r.serialized_key_size).encode())
        elif part == "S":
            chunks.append(str(r.serialized_value_size).encode())
        elif part == "h":
            chunks.append(b",".join(
                k.encode() + b"=" + (v or b"") for k, v in r.headers
            ))
    return b"".join(chunks)


def _text(data: bytes | None) -> tuple[str | None, bool]:
    """(text, is_base64): UTF-8 as it is, anything else base64."""
    if data is None:
        return None, False
    try:
        return data.decode(), False
    except UnicodeDecodeError:
        import base64

        return base64.b64encode(data).decode(), True


def _json_line(r: ConsumerRecord) -> bytes:
    import json

    obj: dict[str, object] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestamp_type": _TIMESTAMP_TYPES.get(r.timestamp_type, "NoTimestampType"),
    }
    for name in ("key", "value"):
        text, b64 = _text(getattr(r, name))
        obj[name] = text
        if b64:
            obj[f"{name}_encoding"] = "base64"
    headers = []
    for k, v in r.headers:
        text, b64 = _text(v)
        header: dict[str, object] = {"key": k, "value": text}
        if b64:
            header["value_encoding"] = "base64"
        headers.append(header)
    obj["headers"] = headers
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def register(app: typer.Typer) -> None:
    app.command("consume")(consume)
