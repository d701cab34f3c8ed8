"""``klog groups list|describe|delete|reset-offsets``: consumer groups, as
kafka-consumer-groups.sh shows and changes them.

Formatting only: the requests, the lag computation and the reset plan are
klog.client.admin's (``list_groups``, ``describe_groups``, ``group_lag``,
``delete_groups``, ``plan_group_offsets_reset``, ``alter_group_offsets``).
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
    text,
    with_admin,
)

if TYPE_CHECKING:
    from klog.client.admin import AdminClient, GroupDescription, PartitionLag

groups_app = console.command_group(
    "groups", "List, describe, delete consumer groups and reset their offsets.")

#: Group states in which Kafka lets an admin reset offsets (no active member).
_INACTIVE = ("Empty", "Dead")


@groups_app.command("list")
def list_(
    state: list[str] = typer.Option(
        [], "--state", help="Only groups in this state (Stable, Empty, PreparingRebalance, "
        "CompletingRebalance, Dead); may be repeated."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """List the cluster's groups with their protocol type and state."""
    listed = with_admin(bootstrap_server, lambda admin: admin.list_groups(state or None),
                        command_config=command_config)
    rows = [{"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state}
            for g in listed]
    if json_out:
        console.emit_json(rows)
        return
    t = table("GROUP", "PROTOCOL-TYPE", "STATE")
    for row in rows:
        t.add_row(text(row["group"]), text(row["protocol_type"] or "-"), text(row["state"]))
    print_table(t)


def _lag_json(row: PartitionLag) -> dict[str, Any]:
    return {"topic": row.topic, "partition": row.partition,
            "current_offset": row.current_offset, "log_end_offset": row.log_end_offset,
            "lag": row.lag, "consumer_id": row.member_id, "host": row.host,
            "client_id": row.client_id}


def _state_json(d: GroupDescription) -> dict[str, Any]:
    c = d.coordinator
    return {"group": d.group_id, "coordinator": {"id": c.node_id, "host": c.host,
                                                 "port": c.port},
            "assignment_strategy": d.protocol or None, "state": d.state,
            "members": len(d.members)}


def _members_json(d: GroupDescription) -> list[dict[str, Any]]:
    return [{"consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
             "host": m.host, "client_id": m.client_id, "partitions": len(m.assignment),
             "assignment": [{"topic": t, "partition": p} for t, p in m.assignment]}
            for m in d.members]


@groups_app.command("describe")
def describe(
    groups: list[str] = typer.Argument(None, help="Groups to describe."),
    all_groups: bool = typer.Option(False, "--all-groups", help="Describe every group."),
    members: bool = typer.Option(
        False, "--members", help="Show the members instead of the partitions."),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="With --members: each member's partitions too."),
    state: bool = typer.Option(
        False, "--state", help="Show the coordinator, assignor, state and member count."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Show groups: per partition the committed offset, log end offset, lag and consumer
    (default), the members (--members) or the group's state (--state)."""
    if members and state:
        fail("--members and --state are separate views: choose one", console.EXIT_USAGE)
    if not groups and not all_groups:
        fail("name a group or give --all-groups", console.EXIT_USAGE)

    async def body(admin: AdminClient) -> list[tuple[GroupDescription, list[PartitionLag]]]:
        names = list(groups or [])
        if all_groups:
            names = [g.group_id for g in await admin.list_groups()]
        out: list[tuple[GroupDescription, list[PartitionLag]]] = []
        for name in names:
            if members or state:
                out.append(((await admin.describe_groups([name]))[name], []))
            else:
                out.append(await admin.group_lag(name))
        return out

    results = with_admin(bootstrap_server, body, command_config=command_config)
    missing = [d.group_id for d, rows in results
               if d.state == "Dead" and not d.members and not rows]
    if json_out:
        docs = []
        for d, rows in results:
            doc = _state_json(d)
            if members:
                doc["members"] = _members_json(d)
            elif not state:
                doc["members"] = len(d.members)
                doc["partitions"] = [_lag_json(r) for r in rows]
            docs.append(doc)
        console.emit_json(docs)
    elif state:
        t = table("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS",
                  right=("#MEMBERS",))
        for d, _rows in results:
            c = d.coordinator
            t.add_row(text(d.group_id), text(f"{c.host}:{c.port} ({c.node_id})"),
                      text(d.protocol or "-"), text(d.state), str(len(d.members)))
        print_table(t)
    elif members:
        columns = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                   "#PARTITIONS"] + (["ASSIGNMENT"] if verbose else [])
        t = table(*columns, right=("#PARTITIONS",))
        for d, _rows in results:
            for m in d.members:
                cells = [text(d.group_id), text(m.member_id), text(m.group_instance_id),
                         text(m.host), text(m.client_id), str(len(m.assignment))]
                if verbose:
                    cells.append(text(_assignment_text(m.assignment)))
                t.add_row(*cells)
        print_table(t)
        _note_empty(results)
    else:
        t = table("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID",
                  right=("PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"))
        for d, rows in results:
            for r in rows:
                t.add_row(text(d.group_id), text(r.topic), str(r.partition),
                          text(r.current_offset), text(r.log_end_offset), text(r.lag),
                          text(r.member_id), text(r.host), text(r.client_id))
            for m in d.members:  # members with nothing assigned still show up
                if not m.assignment:
                    t.add_row(text(d.group_id), text(None), text(None), text(None),
                              text(None), text(None), text(m.member_id), text(m.host),
                              text(m.client_id))
        print_table(t)
        _note_empty(results)
    if missing:
        fail(f"consumer group {missing[0]!r} does not exist")


def _assignment_text(assignment: tuple[tuple[str, int], ...]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(str(p) for p in sorted(ps))})"
                    for t, ps in sorted(by_topic.items())) or "-"


def _note_empty(results: list[tuple[GroupDescription, list[PartitionLag]]]) -> None:
    for d, _rows in results:
        if not d.members and d.state != "Dead":
            console.info(f"Consumer group '{d.group_id}' has no active members.")


@groups_app.command("delete")
def delete_(
    groups: list[str] = typer.Argument(..., help="Groups to delete."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Delete groups with no active members, and their committed offsets."""
    results = with_admin(bootstrap_server, lambda admin: admin.delete_groups(groups),
                         command_config=command_config)
    rows = [{"group": g, "error": None if results.get(g) is None else str(results[g])}
            for g in groups]
    if json_out:
        console.emit_json(rows)
    else:
        t = table("GROUP", "STATUS")
        for row in rows:
            t.add_row(text(row["group"]), text(row["error"] or "deleted"))
        print_table(t)
    if any(row["error"] for row in rows):
        raise typer.Exit(console.EXIT_DAMAGE)


def parse_topic_partitions(values: list[str]) -> list[tuple[str, list[int]]]:
    """``TOPIC`` or ``TOPIC:0,2,5-7`` (kafka-consumer-groups' --topic form) -> (topic,
    partitions; empty = all)."""
    out = []
    for value in values:
        topic, sep, spec = value.partition(":")
        if not topic:
            fail(f"--topic {value!r} names no topic", console.EXIT_USAGE)
        parts: list[int] = []
        if sep:
            try:
                for item in spec.split(","):
                    lo, dash, hi = item.strip().partition("-")
                    parts.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
            except ValueError:
                fail(f"--topic {value!r}: partitions must be numbers or ranges (t:0,2,4-6)",
                     console.EXIT_USAGE)
        out.append((topic, parts))
    return out


@groups_app.command("reset-offsets")
def reset_offsets(
    group: str = typer.Argument(..., help="The group."),
    topic: list[str] = typer.Option(
        [], "--topic", "-t", help="TOPIC or TOPIC:0,1,4-6; may be repeated."),
    all_topics: bool = typer.Option(
        False, "--all-topics", help="Every topic the group has committed offsets for."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="To the log start offset."),
    to_latest: bool = typer.Option(False, "--to-latest", help="To the log end offset."),
    to_offset: int | None = typer.Option(None, "--to-offset", help="To this offset."),
    to_datetime: str | None = typer.Option(
        None, "--to-datetime",
        help="To the first offset at or after this time (ISO-8601, UTC unless a zone is "
        "given, or ms since the epoch)."),
    shift_by: int | None = typer.Option(
        None, "--shift-by", help="Move the committed offset by N (negative: back)."),
    execute: bool = typer.Option(
        False, "--execute", help="Commit the new offsets (default: only print the plan)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Only print the plan (the default)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Move a group's committed offsets; the group must have no active members."""
    from klog.cli.offsets import parse_time
    from klog.client.admin import OffsetResetSpec

    chosen = [name for name, given in (
        ("--to-earliest", to_earliest), ("--to-latest", to_latest),
        ("--to-offset", to_offset is not None), ("--to-datetime", to_datetime is not None),
        ("--shift-by", shift_by is not None)) if given]
    if len(chosen) != 1:
        fail("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
             "--shift-by", console.EXIT_USAGE)
    if execute and dry_run:
        fail("--execute and --dry-run exclude each other", console.EXIT_USAGE)
    if bool(topic) == all_topics:
        fail("give --topic or --all-topics", console.EXIT_USAGE)
    if to_offset is not None and to_offset < 0:
        fail("--to-offset must not be negative", console.EXIT_USAGE)
    if to_earliest:
        spec = OffsetResetSpec("earliest")
    elif to_latest:
        spec = OffsetResetSpec("latest")
    elif to_offset is not None:
        spec = OffsetResetSpec("offset", to_offset)
    elif to_datetime is not None:
        spec = OffsetResetSpec("datetime", parse_time(to_datetime, "--to-datetime"))
    else:
        spec = OffsetResetSpec("shift", int(shift_by or 0))
    wanted = parse_topic_partitions(topic)

    async def body(admin: AdminClient) -> dict[tuple[str, int], int]:
        description = (await admin.describe_groups([group]))[group]
        if description.state not in _INACTIVE:
            fail(f"assignments can only be reset if the group {group!r} is inactive, but "
                 f"the current state is {description.state}")
        partitions: list[tuple[str, int]] = []
        if all_topics:
            partitions = sorted(await admin.list_group_offsets(group))
        else:
            cluster = await admin.client.refresh_metadata([t for t, _ in wanted])
            for name, parts in wanted:
                known = cluster.partitions_for(name)
                if known is None:
                    fail(f"topic {name!r} does not exist")
                bad = [p for p in parts if p not in known]
                if bad:
                    fail(f"topic {name!r} has no partition {bad[0]}")
                partitions += [(name, p) for p in (parts or known)]
        plan = await admin.plan_group_offsets_reset(group, partitions, spec)
        if execute and plan:
            errors = await admin.alter_group_offsets(group, plan)
            failed = [(tp, e) for tp, e in errors.items() if e is not None]
            if failed:
                (t, p), error = failed[0]
                fail(f"resetting {t}-{p} of group {group!r} failed: {error}")
        return plan

    plan = with_admin(bootstrap_server, body, command_config=command_config)
    rows = [{"group": group, "topic": t, "partition": p, "new_offset": o}
            for (t, p), o in sorted(plan.items())]
    if json_out:
        console.emit_json({"group": group, "executed": execute, "partitions": rows})
        return
    t = table("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET", right=("PARTITION", "NEW-OFFSET"))
    for row in rows:
        t.add_row(text(group), text(row["topic"]), str(row["partition"]),
                  str(row["new_offset"]))
    print_table(t)
    if not execute:
        console.info("dry run: nothing committed (--execute commits these offsets)")


@groups_app.command("delete-offsets")
def delete_offsets(
    group: str = typer.Argument(..., help="The group."),
    topic: list[str] = typer.Option(
        [], "--topic", "-t", help="TOPIC (every partition) or TOPIC:0,1,4-6; may be "
                                  "repeated."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Forget a group's committed offsets of some partitions (kafka-consumer-groups
    --delete-offsets); partitions the group still consumes are refused."""
    wanted = parse_topic_partitions(topic)
    if not wanted:
        fail("give --topic", console.EXIT_USAGE)

    async def body(admin: AdminClient) -> dict[tuple[str, int], Any]:
        cluster = await admin.client.refresh_metadata([t for t, _ in wanted])
        partitions: list[tuple[str, int]] = []
        for name, parts in wanted:
            known = cluster.partitions_for(name)
            if known is None:
                fail(f"topic {name!r} does not exist")
            partitions += [(name, p) for p in (parts or known)]
        return await admin.delete_group_offsets(group, partitions)

    results = with_admin(bootstrap_server, body, command_config=command_config)
    rows = [{"topic": t, "partition": p, "error": None if e is None else str(e)}
            for (t, p), e in sorted(results.items())]
    if json_out:
        console.emit_json({"group": group, "partitions": rows})
    else:
        # kafka-consumer-groups' table: TOPIC PARTITION STATUS (Successful or the error).
        t = table("TOPIC", "PARTITION", "STATUS", right=("PARTITION",))
        for row in rows:
            t.add_row(text(row["topic"]), str(row["partition"]),
                      text(row["error"] or "Successful"))
        print_table(t)
    if any(row["error"] for row in rows):
        raise typer.Exit(console.EXIT_DAMAGE)


def register(app: typer.Typer) -> None:
    app.add_typer(groups_app)
