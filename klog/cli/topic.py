"""``klog topic create|list|describe|alter|delete``: topic administration.

Formatting only: the requests are klog.client.admin's. Also holds what the admin-side
command groups share (``--bootstrap-server``, ``--command-config`` client security
settings, running an AdminClient with one-line errors, key=value parsing), used by
klog.cli.offsets and klog.cli.configs.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

from klog.cli import console
from klog.storage.properties import split_assignment

if TYPE_CHECKING:
    from klog.client.admin import AdminClient, ConfigEntry, PartitionDescription, TopicDescription
    from klog.client.errors import KafkaClientError
    from klog.client.security import ClientSecurity

T = TypeVar("T")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_HELP = "host:port[,host:port...]; default $KLOG_BOOTSTRAP_SERVER or 127.0.0.1:9092."
JSON_HELP = "Print JSON (one document) instead of tables."


def bootstrap_option() -> Any:
    return typer.Option(None, "--bootstrap-server", "-b", help=BOOTSTRAP_HELP)


def json_option() -> Any:
    return typer.Option(False, "--json", help=JSON_HELP)


def resolve_bootstrap(value: str | None) -> str:
    return value or os.environ.get("KLOG_BOOTSTRAP_SERVER") or DEFAULT_BOOTSTRAP


def command_config_option() -> Any:
    return typer.Option(
        None, "--command-config",
        help="Client settings file (Kafka tools' --command-config): security.protocol, "
             "sasl.mechanism, sasl.username/sasl.password or sasl.jaas.config, "
             "ssl.ca.location or ssl.truststore.location (PEM, or PKCS12 with "
             "ssl.truststore.password), ssl.certificate.location and ssl.key.location or "
             "ssl.keystore.location (PEM, or PKCS12 with ssl.keystore.password).")


def load_client_security(path: Path | None, flag: str = "--command-config",
                         also: frozenset[str] = frozenset()) -> ClientSecurity | None:
    """The security settings of a client settings file (None without one); a usage error
    for a file that cannot be read or used, a warning for settings klog does not use
    (``also``: those the command reads itself)."""
    if path is None:
        return None
    from klog.client.security import KNOWN_SETTINGS, ClientSecurity, SecurityConfigError
    from klog.storage.properties import PropertiesError, parse_properties

    try:
        props = parse_properties(path.read_text())
    except (OSError, UnicodeDecodeError, PropertiesError) as exc:
        fail(f"{flag} {path}: {exc}", console.EXIT_USAGE)
    for key in sorted(set(props) - KNOWN_SETTINGS - also):
        console.warn(f"{flag}: {key} is not used by klog's client")
    try:
        return ClientSecurity.from_properties(
            {k: v for k, v in props.items() if k in KNOWN_SETTINGS})
    except SecurityConfigError as exc:
        fail(f"{flag} {path}: {exc}", console.EXIT_USAGE)


def with_admin(bootstrap: str | None, body: Callable[[AdminClient], Awaitable[T]],
               timeout_ms: int = 30000, command_config: Path | None = None,
               security: ClientSecurity | None = None) -> T:
    """Run ``body(admin)`` on a started AdminClient, secured as ``security`` or the
    ``command_config`` file says; client errors become one line and a non-zero exit."""
    import asyncio
    import sys

    # kio imports hypothesis (for its test strategies) when it is installed: ~0.7 s of a
    # command's start-up for nothing. Make it look absent, as `klog broker start` does.
    # None in sys.modules is Python's documented "import fails"; typeshed wants a module.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

    from klog.client.admin import AdminClient
    from klog.client.errors import KafkaClientError

    if security is None:
        security = load_client_security(command_config)

    async def main() -> T:
        async with AdminClient(resolve_bootstrap(bootstrap), request_timeout_ms=timeout_ms,
                               security=security) as admin:
            return await body(admin)

    try:
        return asyncio.run(main())
    except KafkaClientError as exc:
        fail(str(exc))
    except ValueError as exc:  # a bad argument the library refused
        fail(str(exc), console.EXIT_USAGE)


def fail(message: str, code: int = console.EXIT_DAMAGE) -> NoReturn:
    console.fail(message, code)


def parse_pairs(items: list[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` -> dict; a usage error for an item without ``=``."""
    out = {}
    for item in items:
        try:
            key, value = split_assignment(item)
        except ValueError:
            fail(f"{what} {item!r} is not key=value", console.EXIT_USAGE)
        out[key] = value
    return out


def table(*columns: str, right: tuple[str, ...] = ()) -> Any:
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    return t


def print_table(t: Any) -> None:
    """A table at its natural width: cells are never cut short (names, config values);
    a terminal narrower than the table folds the widest cells instead."""
    if console.out.is_terminal:
        for column in t.columns:
            column.no_wrap = False
            column.overflow = "fold"
        console.out.print(t)
    else:  # piped: the full width, for scripts and for whoever reads the file later
        from rich.measure import Measurement

        width = Measurement.get(console.out, console.out.options.update_width(1 << 16),
                                t).maximum
        saved = console.out.width
        console.out.width = max(saved, width)
        try:
            console.out.print(t)
        finally:
            console.out.width = saved


def text(value: object) -> Any:
    from rich.text import Text

    return Text("-" if value is None else str(value))


def ids(values: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def config_json(entry: ConfigEntry) -> dict[str, Any]:
    return {"name": entry.name, "value": None if entry.is_sensitive else entry.value,
            "source": entry.source, "read_only": entry.read_only,
            "sensitive": entry.is_sensitive,
            "synonyms": [{"name": s.name, "value": s.value, "source": s.source}
                         for s in entry.synonyms]}


def print_configs(entries: list[ConfigEntry], notes: Mapping[str, str] | None = None
                  ) -> None:
    """KEY, VALUE, SOURCE; and NOTE when ``notes`` (config name -> note) has any."""
    columns = ("KEY", "VALUE", "SOURCE", "NOTE") if notes else ("KEY", "VALUE", "SOURCE")
    t = table(*columns)
    for e in sorted(entries, key=lambda e: e.name):
        row = [text(e.name), text("(sensitive)" if e.is_sensitive else e.value),
               text(e.source)]
        if notes:
            row.append(text(notes.get(e.name, "")))
        t.add_row(*row)
    print_table(t)


topic_app = console.command_group(
    "topic", "Create, list, describe, alter and delete topics on a cluster.")


@topic_app.command("create")
def create(
    names: list[str] = typer.Argument(..., help="Topics to create."),
    partitions: int = typer.Option(
        -1, "--partitions", "-p", help="Partitions per topic (default: num.partitions)."),
    replicas: int = typer.Option(
        -1, "--replication-factor", "--replicas", "-r",
        help="Replication factor (default: default.replication.factor)."),
    config: list[str] = typer.Option(
        [], "--config", "-c", help="A topic config key=value; may be repeated."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate only: the broker checks but creates nothing."),
    if_not_exists: bool = typer.Option(
        False, "--if-not-exists", help="A topic that exists already is not an error."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Create topics."""
    from klog.client.admin import NewTopic

    configs = parse_pairs(config, "config")
    new = [NewTopic(n, partitions, replicas, configs=configs) for n in names]
    results = with_admin(bootstrap_server,
                         lambda admin: admin.create_topics(new, validate_only=dry_run),
                         command_config=command_config)
    # TOPIC_ALREADY_EXISTS (36) is no failure with --if-not-exists.
    _report_outcomes(names, results, 36 if if_not_exists else None, json_out,
                     "OK (dry run)" if dry_run else "OK")


@topic_app.command("list")
def list_(
    internal: bool = typer.Option(
        False, "--internal", "-i", help="Include internal topics (__consumer_offsets...)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """List topics with their partition counts and replication factors."""
    topics = with_admin(bootstrap_server,
                        lambda admin: admin.list_topics(include_internal=internal),
                        command_config=command_config)
    if json_out:
        console.emit_json([{"topic": d.name, "partitions": len(d.partitions),
                            "replicas": d.replication_factor, "internal": d.internal}
                           for d in topics.values()])
        return
    t = table("NAME", "PARTITIONS", "REPLICAS", right=("PARTITIONS", "REPLICAS"))
    for d in topics.values():
        t.add_row(text(d.name), str(len(d.partitions)), str(d.replication_factor))
    print_table(t)


#: kafka-topics --describe's partition filters: option -> (flag, what it selects).
PARTITION_FILTERS = ("under-replicated", "unavailable", "under-min-isr", "at-min-isr")
_REGEX_CHARS = frozenset("*?+[](){}|^$\\")


def select_topics(patterns: list[str], names: list[str]) -> tuple[list[str], list[str]]:
    """(topics matched, patterns that matched nothing): a pattern with regex characters
    is a regular expression matched against whole names, as kafka-topics' --topic; any
    other pattern names one topic."""
    import re

    chosen: list[str] = []
    unmatched: list[str] = []
    for pattern in patterns:
        if _REGEX_CHARS & set(pattern):
            try:
                regex = re.compile(pattern)
            except re.error as exc:
                fail(f"bad topic regex {pattern!r}: {exc}", console.EXIT_USAGE)
            found = [n for n in names if regex.fullmatch(n)]
        else:
            found = [pattern] if pattern in names else []
        if not found:
            unmatched.append(pattern)
        chosen += [n for n in found if n not in chosen]
    return chosen, unmatched


def partition_selected(p: PartitionDescription, which: str, alive: set[int],
                       min_isr: int) -> bool:
    """Kafka's TopicCommand filters: under-replicated (ISR smaller than the replicas),
    unavailable (no leader, or a leader not alive), under-min-isr (ISR below the topic's
    min.insync.replicas), at-min-isr (ISR exactly at it)."""
    if which == "under-replicated":
        return len(p.isr) < len(p.replicas)
    if which == "unavailable":
        return p.leader < 0 or p.leader not in alive
    if which == "under-min-isr":
        return len(p.isr) < min_isr
    return len(p.isr) == min_isr


def _topic_json(topic: TopicDescription, entries: list[ConfigEntry],
                racks: dict[int, str | None] | None = None) -> dict[str, Any]:
    racks = racks or {}
    return {
        "topic": topic.name, "topic_id": topic.topic_id, "internal": topic.internal,
        "partitions": len(topic.partitions), "replicas": topic.replication_factor,
        "configs": [config_json(e) for e in sorted(entries, key=lambda e: e.name)],
        "partition_details": [{
            "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr),
            # Each replica's broker.rack (null: no rack, or the broker is not alive).
            "replica_racks": [racks.get(r) for r in p.replicas],
            "offline_replicas": list(p.offline_replicas), "error_code": p.error_code,
            "log_start_offset": p.log_start_offset, "high_watermark": p.high_watermark,
        } for p in topic.partitions],
    }


@topic_app.command("describe")
def describe(
    name: list[str] = typer.Argument(
        None, help="Topics, or regular expressions matching whole topic names (default: "
                   "every topic)."),
    summary: bool = typer.Option(False, "--summary", "-s", help="Print the summary only."),
    configs: bool = typer.Option(False, "--configs", "-c", help="Print the configs only."),
    partitions: bool = typer.Option(
        False, "--partitions", "-p", help="Print the partitions only."),
    under_replicated: bool = typer.Option(
        False, "--under-replicated-partitions",
        help="Only partitions whose ISR is smaller than their replicas."),
    unavailable: bool = typer.Option(
        False, "--unavailable-partitions",
        help="Only partitions without a live leader."),
    under_min_isr: bool = typer.Option(
        False, "--under-min-isr-partitions",
        help="Only partitions whose ISR is below min.insync.replicas."),
    at_min_isr: bool = typer.Option(
        False, "--at-min-isr-partitions",
        help="Only partitions whose ISR is exactly min.insync.replicas."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Describe topics like rpk: summary, configs with sources, partitions with leader,
    replicas, ISR, log start offset and high watermark. With a partition filter, the
    matching partitions only, one line each as kafka-topics --describe prints them."""
    from klog.client.admin import ConfigResource

    filters = [f for f, on in zip(PARTITION_FILTERS, (under_replicated, unavailable,
                                                      under_min_isr, at_min_isr),
                                  strict=True) if on]
    if len(filters) > 1:
        fail("give at most one of --under-replicated-partitions, --unavailable-partitions, "
             "--under-min-isr-partitions, --at-min-isr-partitions", console.EXIT_USAGE)
    patterns = list(name or [])
    single = len(patterns) == 1 and not (_REGEX_CHARS & set(patterns[0])) and not filters

    async def body(admin: AdminClient) -> tuple[list[tuple[TopicDescription,
                                                           list[ConfigEntry]]],
                                                dict[int, str | None]]:
        if single:
            wanted = patterns
        else:
            listed = await admin.list_topics(include_internal=True)
            wanted, unmatched = select_topics(patterns, sorted(listed)) if patterns else (
                sorted(listed), [])
            if unmatched and not wanted:
                fail(f"no topic matches {', '.join(map(repr, unmatched))}")
        described = await admin.describe_topics(wanted) if wanted else {}
        resources = [ConfigResource.of("topic", t) for t in wanted]
        entries = await admin.describe_configs(resources) if resources else {}
        # The live brokers and their racks (broker.rack): each replica's rack is shown.
        racks = {b.node_id: b.rack for b in (await admin.describe_cluster()).brokers}
        return [(described[t], entries[ConfigResource.of("topic", t)]) for t in wanted], racks

    found, racks = with_admin(bootstrap_server, body, command_config=command_config)
    if filters:
        _print_filtered(found, filters[0], set(racks), json_out)
        return
    if single:
        topic, entries = found[0]
        if json_out:
            console.emit_json(_topic_json(topic, entries, racks))
        else:
            _print_topic(topic, entries, summary, configs, partitions, racks)
        return
    if json_out:
        console.emit_json({"topics": [_topic_json(t, e, racks) for t, e in found]})
        return
    for index, (topic, entries) in enumerate(found):
        if index:
            console.line("")
        _print_topic(topic, entries, summary, configs, partitions, racks)


def _min_isr(entries: list[ConfigEntry]) -> int:
    for e in entries:
        if e.name == "min.insync.replicas" and e.value is not None:
            return int(e.value)
    return 1


def _print_filtered(found: list[tuple[TopicDescription, list[ConfigEntry]]], which: str,
                    alive: set[int], json_out: bool) -> None:
    rows = []
    for topic, entries in found:
        min_isr = _min_isr(entries)
        for p in topic.partitions:
            if partition_selected(p, which, alive, min_isr):
                rows.append((topic, p))
    if json_out:
        console.emit_json({"filter": which, "partitions": [{
            "topic": t.name, "partition": p.partition, "leader": p.leader,
            "replicas": list(p.replicas), "isr": list(p.isr),
            "offline_replicas": list(p.offline_replicas)} for t, p in rows]})
        return
    for t, p in rows:
        console.raw(f"\tTopic: {t.name}\tPartition: {p.partition}\t"
                    f"Leader: {p.leader if p.leader >= 0 else 'none'}\t"
                    f"Replicas: {','.join(map(str, p.replicas))}\t"
                    f"Isr: {','.join(map(str, p.isr))}\n")


def _replica_racks(replicas: tuple[int, ...], racks: dict[int, str | None]) -> str:
    """Each replica's rack, in replica order ("-": none, or the broker is not alive)."""
    return ",".join(racks.get(r) or "-" for r in replicas)


def _print_topic(topic: TopicDescription, entries: list[ConfigEntry], summary: bool,
                 configs: bool, partitions: bool,
                 racks: dict[int, str | None] | None = None) -> None:
    racks = racks or {}
    # A RACKS column when the cluster has racks (broker.rack set on some broker).
    racked = any(rack is not None for rack in racks.values())
    everything = not (summary or configs or partitions)
    sections = []
    if everything or summary:
        def show_summary() -> None:
            t = table("", "")
            t.show_header = False
            for key, value in (("NAME", topic.name), ("ID", topic.topic_id),
                               ("INTERNAL", str(topic.internal).lower()),
                               ("PARTITIONS", len(topic.partitions)),
                               ("REPLICAS", topic.replication_factor)):
                t.add_row(key, text(value))
            print_table(t)
        sections.append(("SUMMARY", show_summary))
    if everything or configs:
        sections.append(("CONFIGS", lambda: print_configs(entries)))
    if everything or partitions:
        def show_partitions() -> None:
            columns = ["PARTITION", "LEADER", "EPOCH", "REPLICAS", *(
                ["RACKS"] if racked else []), "ISR", "LOG-START-OFFSET", "HIGH-WATERMARK"]
            t = table(*columns, right=("PARTITION", "LEADER", "EPOCH", "LOG-START-OFFSET",
                                       "HIGH-WATERMARK"))
            for p in topic.partitions:
                t.add_row(str(p.partition), str(p.leader), str(p.leader_epoch),
                          ids(p.replicas), *([_replica_racks(p.replicas, racks)]
                                            if racked else []),
                          ids(p.isr), str(p.log_start_offset), str(p.high_watermark))
            print_table(t)
        sections.append(("PARTITIONS", show_partitions))
    for index, (title, show) in enumerate(sections):
        if len(sections) > 1:
            if index:
                console.line("")
            console.out.print(f"[bold]{title}[/bold]")
            console.line("=" * len(title))
        show()


@topic_app.command("alter")
def alter(
    name: str = typer.Argument(..., help="The topic."),
    partitions: int | None = typer.Option(
        None, "--partitions", "-p", help="Grow the topic to this many partitions."),
    set_: list[str] = typer.Option(
        [], "--set", "-s", help="Set a topic config key=value; may be repeated."),
    delete: list[str] = typer.Option(
        [], "--delete", "-d", help="Remove a topic config override; may be repeated."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate only: the broker checks but changes nothing."),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Add partitions to a topic and/or change its configs."""
    from klog.client.admin import AlterConfigOp, ConfigResource

    pairs = parse_pairs(set_, "--set")
    if partitions is None and not pairs and not delete:
        fail("nothing to alter: give --partitions, --set or --delete", console.EXIT_USAGE)
    ops = [AlterConfigOp(k, v, "set") for k, v in pairs.items()]
    ops += [AlterConfigOp(k, None, "delete") for k in delete]

    async def body(admin: AdminClient) -> list[str]:
        errors = []
        if partitions is not None:
            result = await admin.create_partitions({name: partitions},
                                                   validate_only=dry_run)
            errors += [str(e) for e in result.values() if e is not None]
        if ops:
            resource = ConfigResource.of("topic", name)
            altered = await admin.alter_configs({resource: ops}, validate_only=dry_run)
            errors += [str(e) for e in altered.values() if e is not None]
        return errors

    errors = with_admin(bootstrap_server, body, command_config=command_config)
    if errors:
        fail("; ".join(errors))
    changes = []
    if partitions is not None:
        changes.append(f"partitions={partitions}")
    changes += [f"{k}={v}" for k, v in pairs.items()] + [f"-{k}" for k in delete]
    suffix = " (dry run)" if dry_run else ""
    console.line(f"altered {name}: {', '.join(changes)}{suffix}")


@topic_app.command("delete")
def delete_(
    names: list[str] = typer.Argument(..., help="Topics to delete."),
    if_exists: bool = typer.Option(
        False, "--if-exists", help="A topic that does not exist is not an error."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Delete topics."""
    results = with_admin(bootstrap_server, lambda admin: admin.delete_topics(names),
                         command_config=command_config)
    # UNKNOWN_TOPIC_OR_PARTITION (3) is no failure with --if-exists.
    _report_outcomes(names, results, 3 if if_exists else None, json_out, "OK")


def _report_outcomes(names: list[str], results: Mapping[str, KafkaClientError | None],
                     ignored_code: int | None, json_out: bool, ok: str) -> None:
    """One row per topic: its error, or ``ok``; exits 1 when any failed (``ignored_code``
    counts as success)."""
    failed = False
    rows = []
    for name in names:
        error = results.get(name)
        if error is not None and error.error_code == ignored_code:
            error = None
        failed |= error is not None
        rows.append({"topic": name, "error": None if error is None else str(error)})
    if json_out:
        console.emit_json(rows)
    else:
        t = table("TOPIC", "STATUS")
        for row in rows:
            t.add_row(text(row["topic"]), text(row["error"] or ok))
        print_table(t)
    if failed:
        raise typer.Exit(console.EXIT_DAMAGE)


def register(app: typer.Typer) -> None:
    app.add_typer(topic_app)
