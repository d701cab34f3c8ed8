"""``klog configs describe|alter``: topic, broker, user and client configs (kafka-configs.sh).

Formatting only: DescribeConfigs / IncrementalAlterConfigs, Describe/AlterUserScram-
Credentials and Describe/AlterClientQuotas are klog.client.admin's. A user's configs are
its SCRAM credentials, spelt as kafka-configs spells them: ``--set
'SCRAM-SHA-512=[password=secret,iterations=8192]'`` (one mechanism per --set) and
``--delete SCRAM-SHA-512``; the password is salted by the client and never sent -- and its
client quotas (``--set producer_byte_rate=1024``, consumer_byte_rate, request_percentage,
controller_mutation_rate), as are a client id's (``klog configs alter client app --set
producer_byte_rate=1024``). ``--entity-default`` names the default user or client id;
``user NAME --client ID`` (or ``--client-default``) the user's quotas for one client id,
kafka-configs' ``--entity-type users --entity-name NAME --entity-type clients ...``.
``--command-config FILE`` gives the client's security settings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    from klog.client.admin import AdminClient, ConfigResource

DYNAMIC_SOURCES = frozenset({"DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG",
                             "DYNAMIC_DEFAULT_BROKER_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG"})

configs_app = console.command_group(
    "configs", "Describe and alter topic, broker, user (SCRAM credentials, quotas) and client "
    "(quota) configs.")


def _resource(kind: str, name: str | None, entity_default: bool = False) -> ConfigResource:
    """The resource named on the command line; ``--entity-default`` names the brokers'
    cluster-wide default (the empty broker name, as kafka-configs sends it)."""
    from klog.client.admin import ConfigResource

    if entity_default:
        if kind != "broker" or name not in (None, ""):
            fail("--entity-default goes with the broker, user or client type and no name",
                 console.EXIT_USAGE)
        name = ""
    elif name is None:
        fail(f"name the {kind} (or, for brokers, give --entity-default)", console.EXIT_USAGE)

    if kind not in ("topic", "broker", "broker-logger"):
        fail(f"unknown resource type {kind!r}: topic, broker, broker-logger or user, or client "
             "for client-id quotas", console.EXIT_USAGE)
    if kind.startswith("broker") and name != "" and not name.isdigit():
        fail(f"broker id {name!r} is not a number", console.EXIT_USAGE)
    if kind == "broker-logger" and not name:
        fail("name the broker whose loggers to show", console.EXIT_USAGE)
    return ConfigResource.of(kind.replace("-", "_"), name)


# The arguments and options describe and alter share.
def _kind_argument() -> Any:
    return typer.Argument(
        ..., help="topic, broker, broker-logger (a broker's log levels), user or client.")


def _name_argument() -> Any:
    return typer.Argument(None, help="The topic name, broker id, user name or client id.")


def _client_option() -> Any:
    return typer.Option(
        None, "--client", help="With user: the quotas of this client id of the user.")


def _client_default_option() -> Any:
    return typer.Option(
        False, "--client-default", help="With user: the quotas of the user's default client id.")


@configs_app.command("describe")
def describe(
    kind: str = _kind_argument(),
    name: str | None = _name_argument(),
    entity_default: bool = typer.Option(
        False, "--entity-default",
        help="The brokers' cluster-wide default configs, or the default user or client id "
             "(kafka-configs --entity-default)."),
    client: str | None = _client_option(),
    client_default: bool = _client_default_option(),
    all_: bool = typer.Option(
        False, "--all", "-a",
        help="Every config, defaults and static ones included (default: dynamic only)."),
    key: list[str] = typer.Option(
        [], "--key", "-k", help="Only this config; may be repeated."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Print a topic's or a broker's configs with their sources, a user's SCRAM
    credentials (mechanisms and iterations) and quotas, or a client id's quotas."""
    if kind in ("user", "client"):
        entity = _quota_entity(kind, name, entity_default, client, client_default)
        if kind == "user" and name is not None and client is None and not client_default:
            _describe_user(name, entity, json_out, bootstrap_server, command_config)
        else:
            _describe_quotas(entity, json_out, bootstrap_server, command_config)
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
    kind: str = _kind_argument(),
    name: str | None = _name_argument(),
    entity_default: bool = typer.Option(
        False, "--entity-default",
        help="Alter the brokers' cluster-wide default configs, or the default user's or "
             "client id's quotas (kafka-configs --entity-default)."),
    client: str | None = _client_option(),
    client_default: bool = _client_default_option(),
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
    credentials (AlterUserScramCredentials) and quotas; for a client id, its quotas
    (AlterClientQuotas)."""
    from klog.client.admin import AlterConfigOp

    if kind in ("user", "client"):
        entity = _quota_entity(kind, name, entity_default, client, client_default)
        if append or subtract:
            fail(f"a {kind}'s configs take only --set and --delete", console.EXIT_USAGE)
        _alter_user_or_client(entity, set_, delete, dry_run, bootstrap_server,
                              command_config)
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


def _quota_entity(kind: str, name: str | None, entity_default: bool, client: str | None,
                  client_default: bool) -> dict[str, str | None]:
    """The quota entity named on the command line: {"user": name or None (the default),
    "client-id": ...}."""
    if entity_default and name not in (None, ""):
        fail("--entity-default names the default: give no name with it", console.EXIT_USAGE)
    if not entity_default and not name:
        fail(f"name the {kind} (or give --entity-default)", console.EXIT_USAGE)
    value = None if entity_default else name
    if kind == "client":
        if client is not None or client_default:
            fail("--client and --client-default go with the user type", console.EXIT_USAGE)
        return {"client-id": value}
    entity: dict[str, str | None] = {"user": value}
    if client is not None and client_default:
        fail("give --client or --client-default, not both", console.EXIT_USAGE)
    if client is not None or client_default:
        if client == "":
            fail("--client needs a client id", console.EXIT_USAGE)
        entity["client-id"] = client
    return entity


def _entity_text(entity: dict[str, str | None]) -> str:
    """kafka-configs' words: user-principal 'alice', client-id 'app'."""
    words = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(f"{'the default ' if n is None else ''}{words[t]}"
                     f"{'' if n is None else f' {n!r}'}" for t, n in entity.items())


def _quota_line(entity: dict[str, str | None], values: dict[str, float]) -> str:
    listed = ",".join(f"{k}={v}" for k, v in sorted(values.items()))
    return f"Quota configs for {_entity_text(entity)} are {listed}"


def _components(entity: dict[str, str | None]) -> list[tuple[str, int, str | None]]:
    return [(t, 1, None) if n is None else (t, 0, n) for t, n in entity.items()]


def _describe_quotas(entity: dict[str, str | None], json_out: bool, bootstrap: str | None,
                     command_config: Path | None) -> None:
    found = with_admin(bootstrap, lambda admin: admin.describe_client_quotas(
        _components(entity), strict=True), command_config=command_config)
    if json_out:
        console.emit_json({"quotas": [{"entity": e, "values": v} for e, v in found]})
        return
    if not found:
        console.info(f"{_entity_text(entity)} has no quota configs")
    for e, values in found:
        console.line(_quota_line(e, values))


def _describe_user(name: str, entity: dict[str, str | None], json_out: bool,
                   bootstrap: str | None, command_config: Path | None) -> None:
    """A user's quotas and SCRAM credentials, as kafka-configs --describe --entity-type
    users prints them; an error only when the user has neither."""
    from klog.client.errors import KafkaClientError

    async def both(admin: AdminClient) -> tuple[list[tuple[dict[str, str | None],
                                                       dict[str, float]]],
                                                dict[str, list[tuple[str, int]]],
                                                KafkaClientError | None]:
        quotas = await admin.describe_client_quotas(_components(entity), strict=True)
        try:
            users = await admin.describe_user_scram_credentials([name])
        except KafkaClientError as exc:
            if not quotas:
                raise
            return quotas, {}, exc
        return quotas, users, None

    quotas, users, _missing = with_admin(bootstrap, both, command_config=command_config)
    if json_out:
        out: dict[str, object] = {"users": [
            {"user": user, "credentials": [{"mechanism": m, "iterations": i}
                                           for m, i in creds]}
            for user, creds in sorted(users.items())]}
        if quotas:  # the key appears with quotas only, so SCRAM-only output stays as it was
            out["quotas"] = [{"entity": e, "values": v} for e, v in quotas]
        console.emit_json(out)
        return
    for e, values in quotas:
        console.line(_quota_line(e, values))
    for user, creds in sorted(users.items()):
        listed = ", ".join(f"{m}=iterations={i}" for m, i in creds)
        console.line(f"SCRAM credential configs for user-principal '{user}' are {listed}")


def _alter_user_or_client(entity: dict[str, str | None], set_: list[str], delete: list[str],
                          dry_run: bool, bootstrap: str | None,
                          command_config: Path | None) -> None:
    from klog.protocol import scram
    from klog.protocol.client_quotas import QUOTA_KEYS

    is_user_only = list(entity) == ["user"] and entity["user"] is not None
    name = entity.get("user") or ""
    pairs = parse_pairs(set_, "--set")
    allowed = ("SCRAM credentials (" + ", ".join(scram.MECHANISMS) + ") or quotas ("
               if is_user_only else "quotas (") + ", ".join(QUOTA_KEYS) + ")"
    quota_ops: dict[str, float | None] = {}
    upserts = []
    for key, value in pairs.items():
        if key in QUOTA_KEYS:
            try:
                quota_ops[key] = float(value)
            except ValueError:
                fail(f"--set {key}={value}: a quota is a number", console.EXIT_USAGE)
            continue
        if key not in scram.MECHANISMS or not is_user_only:
            fail(f"--set {key}: the configs here are {allowed}", console.EXIT_USAGE)
        match = _SCRAM_VALUE.fullmatch(value.strip())
        options = parse_pairs(match[1].split(",") if match else [], f"--set {key}")
        if "password" not in options:
            fail(f"--set {key}=[password=...,iterations=N]: the password is missing",
                 console.EXIT_USAGE)
        try:
            iterations = int(options.get("iterations", scram.DEFAULT_ITERATIONS))
        except ValueError:
            fail(f"--set {key}: iterations must be a number", console.EXIT_USAGE)
        upserts.append((name, key, options["password"], iterations))
    deletions = []
    for key in (k.strip() for k in delete):
        if key in QUOTA_KEYS:
            quota_ops[key] = None
        elif key in scram.MECHANISMS and is_user_only:
            deletions.append((name, key))
        else:
            fail(f"--delete {key}: not one of the {allowed}", console.EXIT_USAGE)
    if not upserts and not deletions and not quota_ops:
        fail("nothing to alter: give --set or --delete", console.EXIT_USAGE)
    if dry_run and (upserts or deletions):
        fail("--dry-run goes with quotas only (SCRAM credential changes have no dry run)",
             console.EXIT_USAGE)

    async def apply(admin: AdminClient) -> list[str]:
        errors: list[str] = []
        if quota_ops:
            results = await admin.alter_client_quotas([(entity, quota_ops)],
                                                      validate_only=dry_run)
            errors += [str(e) for e in results if e is not None]
        if (upserts or deletions) and not errors:
            scram_results = await admin.alter_user_scram_credentials(upserts, deletions)
            errors += [str(e) for e in scram_results.values() if e is not None]
        return errors

    errors = with_admin(bootstrap, apply, command_config=command_config)
    if errors:
        fail("; ".join(errors))
    what = []
    if quota_ops:
        what.append(f"{len(quota_ops)} quota change(s)")
    if upserts or deletions:
        what.append(f"{len(upserts) + len(deletions)} SCRAM credential change(s)")
    suffix = " (dry run)" if dry_run else ""
    if is_user_only:
        console.line(f"altered user {name}: {', '.join(what)}{suffix}")
    else:
        console.line(f"altered {_entity_text(entity)}: {', '.join(what)}{suffix}")


def register(app: typer.Typer) -> None:
    app.add_typer(configs_app)
