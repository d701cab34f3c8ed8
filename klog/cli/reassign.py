"""``klog reassign generate|execute|verify|cancel|list``: moving partitions between
brokers, as kafka-reassign-partitions.sh does, with its flags, JSON files and lines.

Beyond Kafka: ``--progress`` (bytes moved and remaining per replica being added, from
DescribeLogDirs), ``verify --wait`` (poll until done, live on a terminal) and ``--json``.
Formatting only: planning, throttles and status are klog.tools.reassignment's.
"""

from __future__ import annotations

import asyncio
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
    from klog.client.admin import AdminClient
    from klog.tools.reassignment import (
        Assignment,
        LogDirMoveState,
        PartitionStatus,
        ReplicaProgress,
    )

reassign_app = console.command_group(
    "reassign", "Move partitions between brokers (kafka-reassign-partitions.sh).")

_JSON_FILE_HELP = "The reassignment JSON ({\"version\":1,\"partitions\":[...]})."
_PRESERVE_HELP = "Leave the throttles in place when the reassignment is done."
_PROGRESS_HELP = "Also show bytes moved and remaining per replica being added."


def _read(path: Path, flag: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        fail(f"{flag} {path}: {exc.strerror or exc}", console.EXIT_USAGE)


def _json_file_option() -> Any:
    return typer.Option(..., "--reassignment-json-file", help=_JSON_FILE_HELP)


def _preserve_option() -> Any:
    return typer.Option(False, "--preserve-throttles", help=_PRESERVE_HELP)


def _timeout_option() -> Any:
    return typer.Option(10000, "--timeout", help="Milliseconds to wait for the cluster's answers.")


def _plan(call: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a pure planning step; its refusals become one usage-error line."""
    from klog.tools.reassignment import ReassignmentError

    try:
        return call(*args, **kwargs)
    except ReassignmentError as exc:
        fail(str(exc), console.EXIT_USAGE)


def _run(bootstrap: str | None, body: Any, timeout_ms: int = 30000,
         command_config: Path | None = None) -> Any:
    """with_admin, with the library's refusals (unknown partition, broker) as one line."""
    from klog.tools.reassignment import ReassignmentError

    async def guarded(admin: AdminClient) -> Any:
        try:
            return await body(admin)
        except ReassignmentError as exc:
            fail(str(exc))

    return with_admin(bootstrap, guarded, timeout_ms, command_config=command_config)


def _read_plan(path: Path, validate: bool = True
               ) -> tuple[Assignment, dict[tuple[str, int, int], str]]:
    """The --reassignment-json-file's (targets, log dirs); ``validate``: as a new plan."""
    from klog.tools import reassignment as r

    plan: tuple[Assignment, dict[tuple[str, int, int], str]] = _plan(
        r.parse_reassignment, _read(path, "--reassignment-json-file"), validate=validate)
    return plan


def _cleared_json(cleared: tuple[list[int], list[str]] | None) -> dict[str, Any] | None:
    return None if cleared is None else {"brokers": cleared[0], "topics": cleared[1]}


def _say_cleared(cleared: tuple[list[int], list[str]]) -> None:
    brokers, topics = cleared
    console.line(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    console.line(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'}"
                 f" {','.join(topics)}")


def _human(n: int) -> str:
    if n < 0:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # unreachable


def _progress_json(p: ReplicaProgress) -> dict[str, Any]:
    return {"topic": p.topic, "partition": p.partition, "broker": p.broker,
            "leader": p.leader, "leader_bytes": p.leader_bytes,
            "moved_bytes": p.moved if p.replica_bytes >= 0 else 0,
            "remaining_bytes": p.remaining, "percent": round(p.percent, 1)}


def _progress_table(rows: list[ReplicaProgress]) -> Any:
    t = table("PARTITION", "REPLICA", "LEADER", "MOVED", "REMAINING", "DONE",
              right=("REPLICA", "LEADER", "MOVED", "REMAINING", "DONE"))
    for p in rows:
        t.add_row(text(f"{p.topic}-{p.partition}"), str(p.broker),
                  str(p.leader) if p.leader >= 0 else "-", _human(p.moved),
                  _human(p.remaining), f"{p.percent:.1f}%")
    return t


# --- generate -----------------------------------------------------------------------------


@reassign_app.command("generate")
def generate(
    topics_to_move_json_file: Path = typer.Option(
        ..., "--topics-to-move-json-file",
        help="Topics to move: {\"version\":1,\"topics\":[{\"topic\":\"t\"}]}."),
    broker_list: str = typer.Option(
        ..., "--broker-list", help="The brokers to spread them over, e.g. 1,2,3."),
    disable_rack_aware: bool = typer.Option(
        False, "--disable-rack-aware", help="Ignore the brokers' racks."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Propose a reassignment of whole topics over a list of brokers.

    Prints the current assignment and the proposal, both as reassignment JSON; nothing is
    moved."""
    from klog.tools import reassignment as r

    topics = _plan(r.parse_topics_to_move, _read(topics_to_move_json_file,
                                                 "--topics-to-move-json-file"))
    brokers = _plan(r.parse_broker_list, broker_list)

    async def body(admin: AdminClient) -> tuple[r.Assignment, r.Assignment]:
        current = await r.current_replicas(admin, topics=topics)
        cluster = await admin.describe_cluster()
        racks = {b.node_id: b.rack for b in cluster.brokers if b.node_id in brokers}
        return current, r.propose(current, racks, rack_aware=not disable_rack_aware)

    current, proposed = _run(bootstrap_server, body, command_config=command_config)
    if json_out:
        console.emit_json({"current": r.assignment_json(current),
                           "proposed": r.assignment_json(proposed)})
        return
    console.line(f"Current partition replica assignment\n{r.format_reassignment(current)}\n")
    console.line("Proposed partition reassignment configuration\n"
                 + r.format_reassignment(proposed))


# --- execute ------------------------------------------------------------------------------


@reassign_app.command("execute")
def execute(
    reassignment_json_file: Path = _json_file_option(),
    throttle: int = typer.Option(
        -1, "--throttle",
        help="Limit replication between brokers to this many bytes/s while it moves "
        "(run verify until done to remove it). Rerun with --additional to change it."),
    replica_alter_log_dirs_throttle: int = typer.Option(
        -1, "--replica-alter-log-dirs-throttle",
        help="Limit moves between log dirs of one broker to this many bytes/s."),
    additional: bool = typer.Option(
        False, "--additional",
        help="Start this even though other reassignments are running (also: change the "
        "throttle of a running one by resubmitting it)."),
    timeout: int = _timeout_option(),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Start the reassignment of a reassignment JSON file.

    First prints the current assignment of its partitions: save it to roll back."""
    from klog.tools import reassignment as r

    proposed, log_dirs = _read_plan(reassignment_json_file)
    if timeout <= 0:
        fail("--timeout must be positive", console.EXIT_USAGE)
    report: dict[str, Any] = {"throttle": throttle if throttle >= 0 else None,
                              "log_dir_throttle": replica_alter_log_dirs_throttle
                              if replica_alter_log_dirs_throttle >= 0 else None}

    def say(line: str) -> None:
        if not json_out:
            console.line(line)

    async def body(admin: AdminClient) -> None:
        # Kafka's order of checks: running reassignments, then brokers, then partitions.
        ongoing = await admin.list_partition_reassignments()
        if ongoing and not additional:
            fail(r.EXISTING_REASSIGNMENT)
        await r.verify_brokers(admin, proposed)
        current = await r.current_replicas(admin, tps=proposed)
        report["current"] = r.assignment_json(current)
        say(f"Current partition replica assignment\n\n{r.format_reassignment(current)}\n\n"
            f"Save this to use as the --reassignment-json-file option during rollback")
        if throttle >= 0 or replica_alter_log_dirs_throttle >= 0:
            say(r.VERIFY_WARNING)
        if throttle >= 0:
            moves = r.move_map(ongoing, proposed, current)
            await r.apply_changes(admin, r.throttle_changes(moves, throttle))
            report["throttled_brokers"] = sorted(r.reassigning_brokers(moves))
            say(f"The inter-broker throttle limit was set to {throttle} B/s")
        if replica_alter_log_dirs_throttle >= 0:
            # On the brokers whose replicas change log dir (Kafka's calculateMovingBrokers).
            movers = sorted(r.moving_brokers(log_dirs))
            report["log_dir_throttled_brokers"] = movers
            if movers:
                await r.apply_changes(admin, r.log_dir_throttle_changes(
                    movers, replica_alter_log_dirs_throttle))
                say(f"The replica-alter-dir throttle limit was set to "
                    f"{replica_alter_log_dirs_throttle} B/s")
            else:
                say("No replica changes log directory: the replica-alter-dir throttle "
                    "was not set")
        errors = await r.start(admin, proposed)
        if errors:
            fail("Error reassigning partition(s): " + "; ".join(
                f"{r.tp_name(tp)}: {errors[tp]}" for tp in r.sorted_tps(errors)))
        started = [r.tp_name(tp) for tp in r.sorted_tps(proposed)]
        report["started"] = started
        say(f"Successfully started partition reassignment{'' if len(started) == 1 else 's'}"
            f" for {','.join(started)}")
        if log_dirs:
            # Kafka's executeMoves: retried until each replica is on its broker.
            moved = await r.start_log_dir_moves(admin, log_dirs, timeout)
            report["log_dir_moves"] = [{"topic": t, "partition": p, "broker": b,
                                        "log_dir": log_dirs[(t, p, b)]}
                                       for t, p, b in moved]
            for t, p, b in moved:
                say(f"Successfully started moving log directory to {log_dirs[(t, p, b)]} "
                    f"for replica {t}-{p} with broker {b}")

    _run(bootstrap_server, body, timeout, command_config)
    if json_out:
        console.emit_json(report)


# --- verify -------------------------------------------------------------------------------


def _status_json(s: PartitionStatus) -> dict[str, Any]:
    return {"topic": s.topic, "partition": s.partition, "status": s.state,
            "current_replicas": list(s.current_replicas),
            "target_replicas": list(s.target_replicas)}


@reassign_app.command("verify")
def verify(
    reassignment_json_file: Path = _json_file_option(),
    preserve_throttles: bool = _preserve_option(),
    progress: bool = typer.Option(False, "--progress", help=_PROGRESS_HELP),
    wait: bool = typer.Option(
        False, "--wait", help="Poll until every partition is done (live progress on a "
        "terminal), then report."),
    interval: float = typer.Option(
        1.0, "--interval", help="Seconds between polls with --wait."),
    timeout: int = typer.Option(
        0, "--timeout", help="With --wait: give up after this many ms (0: no limit)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Show whether each partition of the file has finished moving.

    Once all have, removes the throttles (unless --preserve-throttles). Exits 0 either
    way, as Kafka's tool."""
    from klog.tools import reassignment as r

    targets, log_dirs = _read_plan(reassignment_json_file, validate=False)
    if interval <= 0 or timeout < 0:
        fail("--interval must be positive and --timeout not negative", console.EXIT_USAGE)
    live = wait and console.out.is_terminal and not json_out

    async def poll(admin: AdminClient) -> tuple[list[PartitionStatus], list[ReplicaProgress],
                                                list[LogDirMoveState]]:
        states = await r.partition_statuses(admin, targets)
        moving = []
        if progress or live:
            ongoing = await admin.list_partition_reassignments(
                [(s.topic, s.partition) for s in states if not s.done])
            moving = await r.progress(admin, ongoing)
        return states, moving, await r.log_dir_move_states(admin, log_dirs)

    def finished(states: list[PartitionStatus], moves: list[LogDirMoveState]) -> bool:
        return all(s.done for s in states) and all(m.done for m in moves)

    async def body(admin: AdminClient) -> dict[str, Any]:
        deadline = time.monotonic() + timeout / 1000 if timeout else None
        states, moving, moves = await poll(admin)
        if wait and not finished(states, moves):
            from rich.live import Live

            with Live(_progress_table(moving), console=console.out, transient=True,
                      auto_refresh=False) if live else _nothing() as view:
                while not finished(states, moves):
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    await asyncio.sleep(interval)
                    states, moving, moves = await poll(admin)
                    if live:
                        view.update(_progress_table(moving), refresh=True)
        cleared = None
        if finished(states, moves) and not preserve_throttles:
            cleared = await r.clear_throttles(admin, targets)
        return {"states": states, "progress": moving, "moves": moves, "cleared": cleared}

    result = _run(bootstrap_server, body, command_config=command_config)
    states, moving, cleared = result["states"], result["progress"], result["cleared"]
    moves = result["moves"]
    if json_out:
        doc: dict[str, Any] = {
            "partitions": [_status_json(s) for s in states],
            "log_dir_moves": [_move_json(m) for m in moves],
            "done": finished(states, moves),
            "throttles_cleared": _cleared_json(cleared)}
        if progress:
            doc["progress"] = [_progress_json(p) for p in moving]
        console.emit_json(doc)
        return
    console.line("Status of partition reassignment:")
    for s in states:
        console.line(r.status_line(s))
    if moves:
        console.line("")
        console.line("Status of replica log directory moves:")
        for m in moves:
            console.line(m.line())
    if progress and moving:
        print_table(_progress_table(moving))
    if cleared is not None:
        console.line("")
        _say_cleared(cleared)


def _move_json(m: LogDirMoveState) -> dict[str, Any]:
    return {"topic": m.replica[0], "partition": m.replica[1], "broker": m.replica[2],
            "status": m.state, "target_log_dir": m.target_dir,
            "current_log_dir": m.current_dir, "future_log_dir": m.future_dir}


class _nothing:  # stands in for rich's Live when not on a terminal
    def __enter__(self) -> _nothing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None


# --- cancel -------------------------------------------------------------------------------


@reassign_app.command("cancel")
def cancel(
    reassignment_json_file: Path = _json_file_option(),
    preserve_throttles: bool = _preserve_option(),
    timeout: int = _timeout_option(),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Cancel the running reassignments of the file's partitions.

    They go back to their original replicas; then the throttles are removed (unless
    --preserve-throttles)."""
    from klog.tools import reassignment as r

    targets, log_dirs = _read_plan(reassignment_json_file, validate=False)
    if timeout <= 0:
        fail("--timeout must be positive", console.EXIT_USAGE)

    async def body(admin: AdminClient) -> tuple[list[Any], list[Any], Any]:
        cancelled, errors = await r.cancel(admin, targets)
        if errors:
            fail(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'}"
                 " for: " + "; ".join(f"{r.tp_name(tp)}: {errors[tp]}"
                                      for tp in r.sorted_tps(errors)))
        # Kafka: an active move between log dirs is cancelled by asking for the dir the
        # replica is in now.
        active = {m.replica: m.current_dir for m in await r.log_dir_move_states(admin, log_dirs)
                  if not m.done and m.current_dir is not None}
        stopped = await r.start_log_dir_moves(admin, active, timeout) if active else []
        cleared = None if preserve_throttles else await r.clear_throttles(admin, targets)
        return cancelled, stopped, cleared

    cancelled, stopped, cleared = _run(bootstrap_server, body, timeout, command_config)
    names = [r.tp_name(tp) for tp in cancelled]
    if json_out:
        console.emit_json({"cancelled": names,
                           "cancelled_log_dir_moves": [r.replica_name(m) for m in stopped],
                           "throttles_cleared": _cleared_json(cleared)})
        return
    if names:
        console.line(f"Successfully cancelled partition reassignment"
                     f"{'' if len(names) == 1 else 's'} for: {','.join(names)}")
    else:
        console.line("None of the specified partition reassignments are active.")
    if log_dirs and not stopped:
        console.line("None of the specified partition moves are active.")
    for replica in stopped:
        console.line(f"Successfully cancelled the log directory move of replica "
                     f"{r.replica_name(replica)}")
    if cleared is not None:
        _say_cleared(cleared)


# --- list ---------------------------------------------------------------------------------


@reassign_app.command("list")
def list_(
    progress: bool = typer.Option(False, "--progress", help=_PROGRESS_HELP),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """List the partition reassignments in progress in the cluster."""
    from klog.tools import reassignment as r

    async def body(admin: AdminClient) -> tuple[dict[Any, Any], list[ReplicaProgress]]:
        ongoing = await admin.list_partition_reassignments()
        return ongoing, (await r.progress(admin, ongoing)) if progress else []

    ongoing, moving = _run(bootstrap_server, body, command_config=command_config)
    if json_out:
        doc: dict[str, Any] = {"reassignments": [
            {"topic": t, "partition": p, "replicas": list(ongoing[(t, p)].replicas),
             "adding_replicas": list(ongoing[(t, p)].adding_replicas),
             "removing_replicas": list(ongoing[(t, p)].removing_replicas)}
            for t, p in r.sorted_tps(ongoing)]}
        if progress:
            doc["progress"] = [_progress_json(p) for p in moving]
        console.emit_json(doc)
        return
    if not ongoing:
        console.line("No partition reassignments found.")
        return
    console.line("Current partition reassignments:")
    for tp in r.sorted_tps(ongoing):
        console.line(r.ongoing_line(tp, ongoing[tp]))
    if progress and moving:
        print_table(_progress_table(moving))


def register(app: typer.Typer) -> None:
    app.add_typer(reassign_app)
