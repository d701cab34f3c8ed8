"""``klog topic create|list|describe|alter|delete``: topic administration.

Formatting only: the requests are klog.client.admin's. Also holds what the admin-side
command groups share (``--bootstrap-server``, ``--command-config`` client security
settings, running an AdminClient with one-line errors, key=value parsing), used by
klog.cli.offsets and klog.cli.configs.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

from klog.cli import console

if TYPE_CHECKING:
    from klog.client.admin import AdminClient, ConfigEntry, TopicDescription
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
        help="Client settings file (kafka-configs' --command-config): security.protocol, "
             "sasl.mechanism, sasl.username/sasl.password or sasl.jaas.config, "
             "ssl.ca.location (or a PEM ssl.truststore.location), ssl.certificate.location "
             "and ssl.key.location.")


def load_client_security(path: Path | None) -> ClientSecurity | None:
    """The security settings of a --command-config file (None without one); a usage error
    for a file that cannot be read or used, a warning for settings klog does not use."""
    if path is None:
        return None
    from klog.client.security import KNOWN_SETTINGS, ClientSecurity, SecurityConfigError
    from klog.storage.properties import PropertiesError, parse_properties

    try:
        props = parse_properties(path.read_text())
    except (OSError, UnicodeDecodeError, PropertiesError) as exc:
        fail(f"--command-config {path}: {exc}", console.EXIT_USAGE)
    for key in sorted(set(props) - KNOWN_SETTINGS):
        console.warn(f"--command-config: {key} is not used by klog's client")
    try:
        return ClientSecurity.from_properties(props)
    except SecurityConfigError as exc:
        fail(f"--command-config {path}: {exc}", console.EXIT_USAGE)


def with_admin(bootstrap: str | None, body: Callable[[AdminClient], Awaitable[T]],
               timeout_ms: int = 30000, command_config: Path | None = None) -> T:
    """Run ``body(admin)`` on a started AdminClient (secured as ``command_config`` says);
    client errors become one line and a non-zero exit."""
    import asyncio
    import sys

    # kio imports hypothesis (for its test strategies) when it is installed: ~0.7 s of a
    # command's start-up for nothing. Make it look absent, as `klog broker start` does.
    # None in sys.modules is Python's documented "import fails"; typeshed wants a module.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

    from klog.client.admin import AdminClient
    from klog.client.errors import KafkaClientError

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
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"{what} {item!r} is not key=value", console.EXIT_USAGE)
        out[key.strip()] = value
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


def print_configs(entries: list[ConfigEntry]) -> None:
    t = table("KEY", "VALUE", "SOURCE")
    for e in sorted(entries, key=lambda e: e.name):
        t.add_row(text(e.name), text("(sensitive)" if e.is_sensitive else e.value),
                  text(e.source))
    print_table(t)


topic_app = typer.Typer(
    name="topic",
    help="Create, list, describe, alter and delete topics on a cluster.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


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
) -> None:
    """Create topics."""
    from klog.client.admin import NewTopic

    configs = parse_pairs(config, "config")
    new = [NewTopic(n, partitions, replicas, configs=configs) for n in names]
    results = with_admin(bootstrap_server,
                         lambda admin: admin.create_topics(new, validate_only=dry_run))
    failed = False
    rows = []
    for name in names:
        error = results.get(name)
        if error is not None and if_not_exists and error.error_code == 36:
            error = None
        failed |= error is not None
        rows.append({"topic": name, "error": None if error is None else str(error)})
    if json_out:
        console.emit_json(rows)
    else:
        t = table("TOPIC", "STATUS")
        for row in rows:
            t.add_row(text(row["topic"]), text(row["error"] or (
                "OK (dry run)" if dry_run else "OK")))
        print_table(t)
    if failed:
        raise typer.Exit(console.EXIT_DAMAGE)


@topic_app.command("list")
def list_(
    internal: bool = typer.Option(
        False, "--internal", "-i", help="Include internal topics (__consumer_offsets...)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
) -> None:
    """List topics with their partition counts and replication factors."""
    topics = with_admin(bootstrap_server,
                        lambda admin: admin.list_topics(include_internal=internal))
    if json_out:
        console.emit_json([{"topic": d.name, "partitions": len(d.partitions),
                            "replicas": d.replication_factor, "internal": d.internal}
                           for d in topics.values()])
        return
    t = table("NAME", "PARTITIONS", "REPLICAS", right=("PARTITIONS", "REPLICAS"))
    for d in topics.values():
        t.add_row(text(d.name), str(len(d.partitions)), str(d.replication_factor))
    print_table(t)


@topic_app.command("describe")
def describe(
    name: str = typer.Argument(..., help="The topic."),
    summary: bool = typer.Option(False, "--summary", "-s", help="Print the summary only."),
    configs: bool = typer.Option(False, "--configs", "-c", help="Print the configs only."),
    partitions: bool = typer.Option(
        False, "--partitions", "-p", help="Print the partitions only."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
) -> None:
    """Describe a topic like rpk: summary, configs with sources, partitions with leader,
    replicas, ISR, log start offset and high watermark."""
    from klog.client.admin import ConfigResource

    async def body(admin: AdminClient) -> tuple[TopicDescription, list[ConfigEntry]]:
        described = await admin.describe_topics([name])
        resource = ConfigResource.of("topic", name)
        entries = (await admin.describe_configs([resource]))[resource]
        return described[name], entries

    topic, entries = with_admin(bootstrap_server, body)
    if json_out:
        console.emit_json({
            "topic": topic.name, "topic_id": topic.topic_id, "internal": topic.internal,
            "partitions": len(topic.partitions), "replicas": topic.replication_factor,
            "configs": [config_json(e) for e in sorted(entries, key=lambda e: e.name)],
            "partition_details": [{
                "partition": p.partition, "leader": p.leader, "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas), "isr": list(p.isr),
                "offline_replicas": list(p.offline_replicas), "error_code": p.error_code,
                "log_start_offset": p.log_start_offset, "high_watermark": p.high_watermark,
            } for p in topic.partitions],
        })
        return
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
            t = table("PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "LOG-START-OFFSET",
                      "HIGH-WATERMARK",
                      right=("PARTITION", "LEADER", "EPOCH", "LOG-START-OFFSET",
                             "HIGH-WATERMARK"))
            for p in topic.partitions:
                t.add_row(str(p.partition), str(p.leader), str(p.leader_epoch),
                          ids(p.replicas), ids(p.isr), str(p.log_start_offset),
                          str(p.high_watermark))
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

    errors = with_admin(bootstrap_server, body)
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
) -> None:
    """Delete topics."""
    results = with_admin(bootstrap_server, lambda admin: admin.delete_topics(names))
    failed = False
    rows = []
    for name in names:
        error = results.get(name)
        if error is not None and if_exists and error.error_code == 3:
            error = None
        failed |= error is not None
        rows.append({"topic": name, "error": None if error is None else str(error)})
    if json_out:
        console.emit_json(rows)
    else:
        t = table("TOPIC", "STATUS")
        for row in rows:
            t.add_row(text(row["topic"]), text(row["error"] or "OK"))
        print_table(t)
    if failed:
        raise typer.Exit(console.EXIT_DAMAGE)


def register(app: typer.Typer) -> None:
    app.add_typer(topic_app)
