"""``klog configs describe|alter``: topic, broker and user configs (kafka-configs.sh).

Formatting only: DescribeConfigs / IncrementalAlterConfigs and Describe/AlterUserScram-
Credentials are klog.client.admin's. A user's configs are its SCRAM credentials, spelt as
kafka-configs spells them: ``--set 'SCRAM-SHA-512=[password=secret,iterations=8192]'``
(one mechanism per --set) and ``--delete SCRAM-SHA-512``; the password is salted by the
client and never sent. ``--command-config FILE`` gives the client's security settings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from klog.cli import console
from klog.cli.topic import (
    bootstrap_option,
    command_config_option,
    config_json,
    fail,
    json_option,
    parse_pairs,
    print_configs,
    with_admin,
)

#: The mark DescribeConfigs' documentation carries for a config klog accepts but does not
#: implement (klog/daemon/config/describe.py).
NOT_IMPLEMENTED = "accepted, not implemented"

if TYPE_CHECKING:
    from klog.client.admin import ConfigResource

DYNAMIC_SOURCES = frozenset({"DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG",
                             "DYNAMIC_DEFAULT_BROKER_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG"})

configs_app = typer.Typer(
    name="configs",
    help="Describe and alter topic, broker and user (SCRAM credential) configs.",
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
        fail(f"unknown resource type {kind!r}: topic, broker or user", console.EXIT_USAGE)
    if kind == "broker" and name != "" and not name.isdigit():
        fail(f"broker id {name!r} is not a number", console.EXIT_USAGE)
    return ConfigResource.of(kind, name)


@configs_app.command("describe")
def describe(
    kind: str = typer.Argument(..., help="topic, broker or user."),
    name: str | None = typer.Argument(
        None, help="The topic name, broker id or user name."),
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
    command_config: Path | None = command_config_option(),
) -> None:
    """Print a topic's or a broker's configs with their sources, or a user's SCRAM
    credentials (mechanisms and iterations)."""
    if kind == "user":
        _describe_user(name or "", json_out, bootstrap_server, command_config)
        return
    resource = _resource(kind, name, entity_default)
    name = resource.name
    broker = kind == "broker"
    # A broker's documentation says which configs klog accepts but does not implement.
    result = with_admin(bootstrap_server, lambda admin: admin.describe_configs(
        [resource], keys=key or None, include_documentation=broker),
        command_config=command_config)
    entries = result.get(resource, [])
    unimplemented = {e.name for e in entries
                     if broker and NOT_IMPLEMENTED in (e.documentation or "")}
    if not all_ and not key:
        entries = [e for e in entries if e.source in DYNAMIC_SOURCES]
    entries.sort(key=lambda e: e.name)
    if json_out:
        configs = [config_json(e) for e in entries]
        if broker:
            for config in configs:
                config["implemented"] = config["name"] not in unimplemented
        console.emit_json({"resource_type": kind, "resource_name": name,
                           "configs": configs})
        return
    if not entries:
        console.info(f"{kind} {name or '<default>'} has no dynamic configs (--all prints "
                     "every config)")
        return
    print_configs(entries, {n: NOT_IMPLEMENTED for n in unimplemented})


@configs_app.command("alter")
def alter(
    kind: str = typer.Argument(..., help="topic, broker or user."),
    name: str | None = typer.Argument(
        None, help="The topic name, broker id or user name."),
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
    command_config: Path | None = command_config_option(),
) -> None:
    """Change configs incrementally (IncrementalAlterConfigs); for a user, its SCRAM
    credentials (AlterUserScramCredentials)."""
    from klog.client.admin import AlterConfigOp

    if kind == "user":
        if append or subtract or dry_run:
            fail("a user's SCRAM credentials take only --set and --delete",
                 console.EXIT_USAGE)
        _alter_user(name or "", set_, delete, bootstrap_server, command_config)
        return
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
        {resource: ops}, validate_only=dry_run), command_config=command_config)
    errors = [str(e) for e in result.values() if e is not None]
    if errors:
        fail("; ".join(errors))
    suffix = " (dry run)" if dry_run else ""
    console.line(f"altered {kind} {name}: {len(ops)} change(s){suffix}")


# -- users: SCRAM credentials --------------------------------------------------------------

_SCRAM_VALUE = re.compile(r"\[(.*)\]")


def _describe_user(name: str, json_out: bool, bootstrap: str | None,
                   command_config: Path | None) -> None:
    users = with_admin(bootstrap, lambda admin: admin.describe_user_scram_credentials(
        [name] if name else None), command_config=command_config)
    if json_out:
        console.emit_json({"users": [
            {"user": user, "credentials": [{"mechanism": m, "iterations": i}
                                           for m, i in creds]}
            for user, creds in sorted(users.items())]})
        return
    if not users:
        console.info("no user has SCRAM credentials")
    for user, creds in sorted(users.items()):
        listed = ", ".join(f"{m}=iterations={i}" for m, i in creds)
        console.line(f"SCRAM credential configs for user-principal '{user}' are {listed}")


def _alter_user(name: str, set_: list[str], delete: list[str], bootstrap: str | None,
                command_config: Path | None) -> None:
    from klog.protocol import scram

    if not name:
        fail("a user name is required", console.EXIT_USAGE)
    upserts = []
    for mechanism, value in parse_pairs(set_, "--set").items():
        if mechanism not in scram.MECHANISMS:
            fail(f"--set {mechanism}: users' configs are SCRAM credentials "
                 f"({', '.join(scram.MECHANISMS)})", console.EXIT_USAGE)
        match = _SCRAM_VALUE.fullmatch(value.strip())
        options = parse_pairs(match[1].split(",") if match else [], f"--set {mechanism}")
        if "password" not in options:
            fail(f"--set {mechanism}=[password=...,iterations=N]: the password is missing",
                 console.EXIT_USAGE)
        try:
            iterations = int(options.get("iterations", scram.DEFAULT_ITERATIONS))
        except ValueError:
            fail(f"--set {mechanism}: iterations must be a number", console.EXIT_USAGE)
        upserts.append((name, mechanism, options["password"], iterations))
    deletions = [(name, mechanism.strip()) for mechanism in delete]
    for _, mechanism in deletions:
        if mechanism not in scram.MECHANISMS:
            fail(f"--delete {mechanism}: not a SCRAM mechanism "
                 f"({', '.join(scram.MECHANISMS)})", console.EXIT_USAGE)
    if not upserts and not deletions:
        fail("nothing to alter: give --set or --delete", console.EXIT_USAGE)
    result = with_admin(bootstrap, lambda admin: admin.alter_user_scram_credentials(
        upserts, deletions), command_config=command_config)
    errors = [str(e) for e in result.values() if e is not None]
    if errors:
        fail("; ".join(errors))
    console.line(f"altered user {name}: {len(upserts) + len(deletions)} SCRAM "
                 "credential change(s)")


def register(app: typer.Typer) -> None:
    app.add_typer(configs_app)
