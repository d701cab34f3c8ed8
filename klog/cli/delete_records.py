"""``klog delete-records``: move partitions' log start offsets up (kafka-delete-records.sh).

Formatting only: DeleteRecords goes to each partition's leader
(klog.client.admin.AdminClient.delete_records). Kafka's file format for
``--offset-json-file``:

    {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}

(offset -1: up to the high watermark), or one partition on the command line:
``klog delete-records TOPIC --partition P --offset N``. Kafka's lines:

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 10
    partition: t-1	error: OFFSET_OUT_OF_RANGE ...

and exit status 1 when any partition failed; ``--json`` prints one document instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from klog.cli import console
from klog.cli.topic import bootstrap_option, command_config_option, fail, json_option, with_admin

if TYPE_CHECKING:
    from klog.client.admin import AdminClient
    from klog.client.errors import KafkaClientError


def parse_offsets_json(text: str, source: str) -> dict[tuple[str, int], int]:
    """Kafka's delete-records JSON -> {(topic, partition): offset}, with its checks."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise ValueError(f"{source}: expected an object with a \"partitions\" list")
    out: dict[tuple[str, int], int] = {}
    for item in doc["partitions"]:
        if not isinstance(item, dict):
            raise ValueError(f"{source}: partition entry {item!r} is not an object")
        topic, partition, offset = item.get("topic"), item.get("partition"), item.get("offset")
        if (not isinstance(topic, str) or not isinstance(partition, int)
                or isinstance(partition, bool) or not isinstance(offset, int)
                or isinstance(offset, bool)):
            raise ValueError(f"{source}: partition entry {item!r} needs a string \"topic\", "
                             f"an integer \"partition\" and an integer \"offset\"")
        if (topic, partition) in out:
            raise ValueError(f"{source}: offset json file contains duplicate topic "
                             f"partitions: {topic}-{partition}")
        out[(topic, partition)] = offset
    if not out:
        raise ValueError(f"{source}: no partitions")
    return out


def delete_records(
    topic: str | None = typer.Argument(None, help="The topic (with --partition, --offset)."),
    partition: int | None = typer.Option(None, "--partition", "-p", min=0,
                                         help="The partition of TOPIC."),
    offset: int | None = typer.Option(None, "--offset", min=-1,
                                      help="Delete records before this offset "
                                           "(-1: up to the high watermark)."),
    offset_json_file: Path | None = typer.Option(
        None, "--offset-json-file", help="Kafka's JSON of partitions and offsets."),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
    as_json: bool = json_option(),
) -> None:
    """Delete the records before the given offsets (move the log start offsets up)."""
    if (offset_json_file is None) == (topic is None):
        fail("give either --offset-json-file or TOPIC with --partition and --offset",
             console.EXIT_USAGE)
    if offset_json_file is not None:
        try:
            before = parse_offsets_json(offset_json_file.read_text(), str(offset_json_file))
        except OSError as exc:
            fail(f"cannot read {offset_json_file}: {exc.strerror}", console.EXIT_USAGE)
        except ValueError as exc:
            fail(str(exc), console.EXIT_USAGE)
    else:
        if partition is None or offset is None:
            fail("TOPIC needs --partition and --offset", console.EXIT_USAGE)
        assert topic is not None
        before = {(topic, partition): offset}

    async def body(admin: AdminClient) -> dict[tuple[str, int], int | KafkaClientError]:
        return dict(await admin.delete_records(before, raise_errors=False))

    if not as_json:
        console.raw("Executing records delete operation\n")
    results = with_admin(bootstrap_server, body, command_config=command_config)
    failed = 0
    rows = []
    for (t, p), result in sorted(results.items()):
        if isinstance(result, int):
            rows.append({"topic": t, "partition": p, "low_watermark": result})
        else:
            failed += 1
            rows.append({"topic": t, "partition": p, "error": str(result)})
    if as_json:
        console.emit_json({"partitions": rows})
    else:
        console.raw("Records delete operation completed:\n")
        for row in rows:
            what = (f"low_watermark: {row['low_watermark']}" if "low_watermark" in row
                    else f"error: {row['error']}")
            console.raw(f"partition: {row['topic']}-{row['partition']}\t{what}\n")
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("delete-records")(delete_records)
