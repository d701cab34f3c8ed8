"""``klog log-dirs describe``: each broker's log directories and the replicas in them
(kafka-log-dirs.sh --describe).

Formatting only: the figures are DescribeLogDirs' (klog.client.admin.AdminClient
.describe_log_dirs). A table by default, then the moves between log dirs in progress
(AlterReplicaLogDirs: a replica's future log in another dir; ``klog reassign`` with
``log_dirs`` starts them); ``--json`` prints the document kafka-log-dirs.sh prints, so
scripts written for it read klog's (a move shows as an ``isFuture`` entry):

    {"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data","error":null,
      "partitions":[{"partition":"t-0","size":123,"offsetLag":0,"isFuture":false}]}]}]}
"""

from __future__ import annotations

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
    with_admin,
)

if TYPE_CHECKING:
    from klog.client.admin import AdminClient, LogDirDescription

log_dirs_app = console.command_group(
    "log-dirs", "Log directories of the brokers (kafka-log-dirs.sh).")


def _csv(value: str | None, what: str, conv: type = str) -> list[Any] | None:
    if value is None:
        return None
    try:
        return [conv(v.strip()) for v in value.split(",") if v.strip()]
    except ValueError:
        fail(f"{what} must be a comma-separated list, not {value!r}", console.EXIT_USAGE)


def kafka_document(dirs: dict[int, list[LogDirDescription]],
                   topics: list[str] | None) -> dict[str, Any]:
    """kafka-log-dirs.sh's JSON document (its key order; topics filter applied)."""
    from klog.protocol.errors import ErrorCode

    brokers = []
    for broker in sorted(dirs):
        entries = []
        for d in dirs[broker]:
            parts = [{"partition": f"{t}-{p}", "size": info.size, "offsetLag": info.offset_lag,
                      "isFuture": info.is_future}
                     for (t, p), info in sorted(d.replicas.items())
                     if topics is None or t in topics]
            error = None if d.error_code == 0 else ErrorCode(d.error_code).name
            entries.append({"logDir": d.log_dir, "error": error, "partitions": parts})
        brokers.append({"broker": broker, "logDirs": entries})
    return {"version": 1, "brokers": brokers}


@log_dirs_app.command("describe")
def describe(
    broker_list: str | None = typer.Option(
        None, "--broker-list", help="Comma-separated broker ids (default: every broker)."),
    topic_list: str | None = typer.Option(
        None, "--topic-list", help="Comma-separated topics (default: every topic)."),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
    as_json: bool = json_option(),
) -> None:
    """Show each broker's log dirs: partitions, sizes, offset lag, free space."""
    brokers = _csv(broker_list, "--broker-list", int)
    topics = _csv(topic_list, "--topic-list")

    async def body(admin: AdminClient) -> dict[int, list[LogDirDescription]]:
        return await admin.describe_log_dirs(brokers)

    dirs = with_admin(bootstrap_server, body, command_config=command_config)
    doc = kafka_document(dirs, topics)
    if as_json:
        console.emit_json(doc)
        return
    t = table("BROKER", "LOG DIR", "PARTITION", "SIZE", "OFFSET LAG", "FUTURE", "ERROR",
              right=("SIZE", "OFFSET LAG"))
    for b in doc["brokers"]:
        for d in b["logDirs"]:
            if not d["partitions"]:
                t.add_row(str(b["broker"]), d["logDir"], "-", "-", "-", "-", d["error"] or "")
            for p in d["partitions"]:
                t.add_row(str(b["broker"]), d["logDir"], p["partition"], str(p["size"]),
                          str(p["offsetLag"]), "yes" if p["isFuture"] else "no",
                          d["error"] or "")
    print_table(t)
    moves = moves_in_progress(doc)
    if moves:
        console.line("")
        m = table("BROKER", "PARTITION", "FROM", "TO", "COPIED", "BEHIND",
                  right=("COPIED", "BEHIND"))
        for move in moves:
            m.add_row(str(move["broker"]), move["partition"], move["from"] or "-",
                      move["to"], str(move["copied"]), str(move["behind"]))
        console.out.print("[bold]Moves between log dirs in progress[/bold]")
        print_table(m)


def moves_in_progress(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each replica with a future log: its broker, where it is and where it goes, the
    bytes copied so far and how many offsets the copy is behind."""
    out = []
    for b in doc["brokers"]:
        current = {p["partition"]: d["logDir"] for d in b["logDirs"]
                   for p in d["partitions"] if not p["isFuture"]}
        for d in b["logDirs"]:
            for p in d["partitions"]:
                if p["isFuture"]:
                    out.append({"broker": b["broker"], "partition": p["partition"],
                                "from": current.get(p["partition"]), "to": d["logDir"],
                                "copied": p["size"], "behind": p["offsetLag"]})
    return out


def register(app: typer.Typer) -> None:
    app.add_typer(log_dirs_app, name="log-dirs")
