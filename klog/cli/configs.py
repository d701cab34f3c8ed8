"""``klog configs describe|alter``: topic and broker configs (kafka-configs.sh).

Formatting only: DescribeConfigs / IncrementalAlterConfigs are klog.client.admin's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from klog.cli import console
from klog.cli.topic import (
    bootstrap_option,
    config_json,
    fail,
    json_option,
    parse_pairs,
    print_configs,
    with_admin,
)

if TYPE_CHECKING:
    from klog.client.admin import ConfigResource

DYNAMIC_SOURCES = frozenset({"DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG",
                             "DYNAMIC_DEFAULT_BROKER_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG"})

configs_app = typer.Typer(
    name="configs",
    help="Describe and alter topic and broker configs.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _resource(kind: str, name: str | None, entity_default: bool = False) -> ConfigResource:
    """The resource named on the command line; ``--entity-default`` names the brokers'
    cluster-wide default (the empty broker name, as kafka-configs sends it)."""
    from klog.client.admin import ConfigResource

    if entity_default:
        if kind != "broker" or name not in (None, ""):
            fail("--entity-default goes with the broker type and no broker id",
                 console.EXIT_USAGE)
        name = ""
    elif name is None:
        fail(f"name the {kind} (or, for brokers, give --entity-default)", console.EXIT_USAGE)

    if kind not in ("topic", "broker"):
        fail(f"unknown resource type {kind!r}: topic or broker", console.EXIT_USAGE)
    if kind == "broker" and name != "" and not name.isdigit():
        fail(f"broker id {name!r} is not a number", console.EXIT_USAGE)
    return ConfigResource.of(kind, name)


@configs_app.command("describe")
def describe(
    kind: str = typer.Argument(..., help="topic or broker."),
    name: str | None = typer.Argument(None, help="The topic name or the broker id."),
    entity_default: bool = typer.Option(
        False, "--entity-default",
        help="The brokers' cluster-wide default configs (kafka-configs --entity-default)."),
    all_: bool = typer.Option(
        False, "--all", "-a",
        help="Every config, defaults and static ones included (default: dynamic only)."),
    key: list[str] = typer.Option(
        [], "--key", "-k", help="Only this config; may be repeated."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
) -> None:
    """Print a topic's or a broker's configs with their sources."""
    resource = _resource(kind, name, entity_default)
    name = resource.name
    result = with_admin(bootstrap_server, lambda admin: admin.describe_configs(
        [resource], keys=key or None))
    entries = result.get(resource, [])
    if not all_ and not key:
        entries = [e for e in entries if e.source in DYNAMIC_SOURCES]
    entries.sort(key=lambda e: e.name)
    if json_out:
        console.emit_json({"resource_type": kind, "resource_name": name,
                           "configs": [config_json(e) for e in entries]})
        return
    if not entries:
        console.info(f"{kind} {name or '<default>'} has no dynamic configs (--all prints "
                     "every config)")
        return
    print_configs(entries)


@configs_app.command("alter")
def alter(
    kind: str = typer.Argument(..., help="topic or broker."),
    name: str | None = typer.Argument(None, help="The topic name or the broker id."),
    entity_default: bool = typer.Option(
        False, "--entity-default",
        help="Alter the brokers' cluster-wide default configs (kafka-configs "
             "--entity-default)."),
    set_: list[str] = typer.Option(
        [], "--set", "-s", help="Set key=value; may be repeated."),
    delete: list[str] = typer.Option(
        [], "--delete", "-d", help="Remove a config override (back to its default)."),
    append: list[str] = typer.Option(
        [], "--append", help="Append to a list config, key=value; may be repeated."),
    subtract: list[str] = typer.Option(
        [], "--subtract", help="Remove from a list config, key=value; may be repeated."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate only: the broker checks but changes nothing."),
    bootstrap_server: str | None = bootstrap_option(),
) -> None:
    """Change configs incrementally (IncrementalAlterConfigs)."""
    from klog.client.admin import AlterConfigOp

    resource = _resource(kind, name, entity_default)
    name = resource.name or "<default>"
    ops = [AlterConfigOp(k, v, "set") for k, v in parse_pairs(set_, "--set").items()]
    ops += [AlterConfigOp(k, None, "delete") for k in delete]
    ops += [AlterConfigOp(k, v, "append") for k, v in parse_pairs(append, "--append").items()]
    ops += [AlterConfigOp(k, v, "subtract")
            for k, v in parse_pairs(subtract, "--subtract").items()]
    if not ops:
        fail("nothing to alter: give --set, --delete, --append or --subtract",
             console.EXIT_USAGE)
    result = with_admin(bootstrap_server, lambda admin: admin.alter_configs(
        {resource: ops}, validate_only=dry_run))
    errors = [str(e) for e in result.values() if e is not None]
    if errors:
        fail("; ".join(errors))
    suffix = " (dry run)" if dry_run else ""
    console.line(f"altered {kind} {name}: {len(ops)} change(s){suffix}")


def register(app: typer.Typer) -> None:
    app.add_typer(configs_app)
