"""``klog offsets TOPIC``: each partition's earliest and latest offsets, and by time.

Formatting only: the ListOffsets requests are klog.client.admin's ``list_offsets``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def parse_time(value: str, option: str = "--time") -> int:
    """A timestamp in ms since the epoch, or an ISO-8601 date/time (UTC when no zone);
    ``option`` names the flag in the error."""
    import datetime

    try:
        return int(value)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        fail(f"{option} {value!r} is neither milliseconds nor an ISO-8601 time",
             console.EXIT_USAGE)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def offsets(
    topic: str = typer.Argument(..., help="The topic."),
    partition: list[int] = typer.Option(
        [], "--partition", "-p", help="Only this partition; may be repeated."),
    time: str | None = typer.Option(
        None, "--time", "-t",
        help="Also the first offset at or after this time (ms since the epoch or ISO-8601)."),
    read_committed: bool = typer.Option(
        False, "--read-committed",
        help="Latest = the last stable offset (isolation level read_committed)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Print each partition's earliest and latest offsets (and the offset for --time)."""
    from klog.client.admin import AdminClient, ListedOffset

    at = None if time is None else parse_time(time)

    async def body(
        admin: AdminClient,
    ) -> tuple[list[int], dict[str, dict[tuple[str, int], Any]]]:
        await admin.client.refresh_metadata([topic])
        known = admin.client.cluster.partitions_for(topic)
        if known is None:
            code = admin.client.cluster.topic_errors.get(topic, 3)
            from klog.client.errors import raise_for

            raise_for(code, f"topic {topic!r}")
        wanted = partition or known or []
        missing = [p for p in wanted if p not in (known or [])]
        if missing:
            fail(f"topic {topic!r} has no partition {missing[0]} "
                 f"(partitions 0-{len(known or []) - 1})")
        specs: dict[str, str | int] = {"earliest": "earliest", "latest": "latest"}
        if at is not None:
            specs["time"] = at
        isolation = 1 if read_committed else 0
        results: dict[str, dict[tuple[str, int], Any]] = {}
        for label, spec in specs.items():
            results[label] = await admin.list_offsets({(topic, p): spec for p in wanted},
                                                      isolation_level=isolation)
        return wanted, results

    wanted, results = with_admin(bootstrap_server, body, command_config=command_config)
    rows = []
    for p in wanted:
        row: dict[str, object] = {
            "partition": p,
            "earliest": results["earliest"][(topic, p)].offset,
            "latest": results["latest"][(topic, p)].offset,
        }
        if at is not None:
            found: ListedOffset = results["time"][(topic, p)]
            row["time"] = at
            row["offset"] = found.offset if found.offset >= 0 else None
            row["timestamp"] = found.timestamp if found.offset >= 0 else None
        rows.append(row)
    if json_out:
        console.emit_json({"topic": topic, "partitions": rows})
        return
    columns = ["PARTITION", "EARLIEST", "LATEST"]
    if at is not None:
        columns += ["OFFSET-AT-TIME", "TIMESTAMP"]
    t = table(*columns, right=tuple(columns))
    for row in rows:
        cells = [str(row["partition"]), str(row["earliest"]), str(row["latest"])]
        if at is not None:
            cells += [text(row["offset"]), text(row["timestamp"])]
        t.add_row(*cells)
    print_table(t)


def register(app: typer.Typer) -> None:
    app.command("offsets")(offsets)
