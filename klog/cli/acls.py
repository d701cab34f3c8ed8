"""``klog acls add|list|remove``: ACLs, with kafka-acls.sh's flags.

``--allow-principal`` / ``--deny-principal`` (repeatable; ``User:name``, ``User:*``),
``--allow-host`` / ``--deny-host`` (default ``*``), ``--operation`` (repeatable; default
All), the resources ``--topic``, ``--group``, ``--transactional-id`` (repeatable) and
``--cluster``, ``--resource-pattern-type`` (LITERAL or PREFIXED to add; ANY, MATCH,
LITERAL or PREFIXED to list and remove), and AclCommand's conveniences: ``--producer``
(Write, Describe, Create on the topics; Write, Describe on the transactional ids;
IdempotentWrite on the cluster with ``--idempotent``) and ``--consumer`` (Read, Describe
on the topics; Read on the groups).

Formatting only: the requests are klog.client.admin's (``create_acls``,
``describe_acls``, ``delete_acls``); the model is klog.protocol.acls.
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
from klog.protocol.acls import (
    CLUSTER_NAME,
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_TYPE_NAMES,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operation_named,
    pattern_type_named,
)

if TYPE_CHECKING:
    from klog.client.admin import AdminClient

acls_app = console.command_group("acls", "Add, list and remove ACLs (kafka-acls.sh).")

OP = AclOperation


def _topic_option() -> Any:
    return typer.Option([], "--topic", help="Topic (repeatable; * for all).")


def _group_option() -> Any:
    return typer.Option([], "--group", help="Consumer group (repeatable; * for all).")


def _txn_option() -> Any:
    return typer.Option([], "--transactional-id",
                        help="Transactional id (repeatable; * for all).")


def _cluster_option() -> Any:
    return typer.Option(False, "--cluster", help="The cluster resource.")


def _pattern_option(default: str) -> Any:
    return typer.Option(default, "--resource-pattern-type",
                        help="LITERAL or PREFIXED (add); ANY, MATCH, LITERAL or PREFIXED "
                        f"(list, remove). Default {default}.")


def _resources(topics: list[str], groups: list[str], txn_ids: list[str], cluster: bool,
               ) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, t) for t in topics]
    out += [(ResourceType.GROUP, g) for g in groups]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn_ids]
    if cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _pattern_type(text_: str, allowed: tuple[PatternType, ...]) -> PatternType:
    try:
        pattern = pattern_type_named(text_)
    except ValueError as exc:
        fail(str(exc), console.EXIT_USAGE)
    if pattern not in allowed:
        fail(f"--resource-pattern-type {text_} is not allowed here (one of "
             f"{', '.join(p.name for p in allowed)})", console.EXIT_USAGE)
    return pattern


def _operations(names: list[str]) -> list[AclOperation]:
    try:
        return [operation_named(n) for n in names] or [OP.ALL]
    except ValueError as exc:
        fail(str(exc), console.EXIT_USAGE)


def _principal(text_: str) -> str:
    kind, sep, name = text_.partition(":")
    if not sep or not kind or not name:
        fail(f"invalid principal {text_!r}: expected Type:name (e.g. User:alice)",
             console.EXIT_USAGE)
    return text_


def _convenience(resources: list[tuple[ResourceType, str]], producer: bool, consumer: bool,
                 idempotent: bool) -> list[tuple[ResourceType, str, list[AclOperation]]]:
    """AclCommand's --producer / --consumer: the operations each resource gets."""
    out: list[tuple[ResourceType, str, list[AclOperation]]] = []
    for kind, name in resources:
        ops: list[AclOperation] = []
        if producer and kind == ResourceType.TOPIC:
            ops += [OP.WRITE, OP.DESCRIBE, OP.CREATE]
        if producer and kind == ResourceType.TRANSACTIONAL_ID:
            ops += [OP.WRITE, OP.DESCRIBE]
        if consumer and kind == ResourceType.TOPIC:
            ops += [OP.READ, OP.DESCRIBE]
        if consumer and kind == ResourceType.GROUP:
            ops += [OP.READ]
        if ops:
            out.append((kind, name, list(dict.fromkeys(ops))))
    if producer and idempotent:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, [OP.IDEMPOTENT_WRITE]))
    return out


def _binding_json(b: AclBinding) -> dict[str, str]:
    return {"resource_type": RESOURCE_TYPE_NAMES.get(b.pattern.resource_type,
                                                     b.pattern.resource_type.name),
            "name": b.pattern.name, "pattern_type": b.pattern.pattern_type.name,
            "principal": b.entry.principal, "host": b.entry.host,
            "operation": OPERATION_NAMES.get(b.entry.operation, b.entry.operation.name),
            "permission": PERMISSION_NAMES.get(b.entry.permission_type,
                                               b.entry.permission_type.name)}


def _print(bindings: list[AclBinding], json_out: bool) -> None:
    rows = [_binding_json(b) for b in sorted(bindings, key=lambda b: (
        int(b.pattern.resource_type), b.pattern.name, int(b.pattern.pattern_type),
        b.entry.principal, b.entry.host, int(b.entry.operation)))]
    if json_out:
        console.emit_json(rows)
        return
    t = table("RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION",
              "PERMISSION")
    for r in rows:
        t.add_row(*(text(r[k]) for k in ("resource_type", "name", "pattern_type",
                                          "principal", "host", "operation", "permission")))
    print_table(t)


@acls_app.command("add")
def add(
    allow_principal: list[str] = typer.Option([], "--allow-principal",
                                              help="Principal to allow (repeatable)."),
    deny_principal: list[str] = typer.Option([], "--deny-principal",
                                             help="Principal to deny (repeatable)."),
    allow_host: list[str] = typer.Option([], "--allow-host",
                                         help="Host the allow applies to (default *)."),
    deny_host: list[str] = typer.Option([], "--deny-host",
                                        help="Host the deny applies to (default *)."),
    operation: list[str] = typer.Option([], "--operation",
                                        help="Operation (repeatable; default All)."),
    topic: list[str] = _topic_option(),
    group: list[str] = _group_option(),
    transactional_id: list[str] = _txn_option(),
    cluster: bool = _cluster_option(),
    resource_pattern_type: str = _pattern_option("LITERAL"),
    producer: bool = typer.Option(False, "--producer",
                                  help="The ACLs a producer needs on the topics."),
    consumer: bool = typer.Option(False, "--consumer",
                                  help="The ACLs a consumer needs on the topics and group."),
    idempotent: bool = typer.Option(False, "--idempotent",
                                    help="With --producer: IdempotentWrite on the cluster."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Add ACLs: each principal, host and operation on each resource."""
    pattern_type = _pattern_type(resource_pattern_type,
                                 (PatternType.LITERAL, PatternType.PREFIXED))
    if not allow_principal and not deny_principal:
        fail("give --allow-principal or --deny-principal", console.EXIT_USAGE)
    resources = _resources(topic, group, transactional_id, cluster)
    if not resources:
        fail("name a resource: --topic, --group, --transactional-id or --cluster",
             console.EXIT_USAGE)
    if producer or consumer:
        if operation:
            fail("--operation cannot be combined with --producer or --consumer",
                 console.EXIT_USAGE)
        if consumer and not group:
            fail("--consumer needs --group as well as --topic", console.EXIT_USAGE)
        planned = _convenience(resources, producer, consumer, idempotent)
    else:
        ops = _operations(operation)
        for kind, _name in resources:
            unsupported = [o for o in ops if o != OP.ALL and o not in SUPPORTED_OPERATIONS[kind]]
            if unsupported:
                fail(f"ResourceType {RESOURCE_TYPE_NAMES[kind]} only supports operations "
                     f"{', '.join(OPERATION_NAMES[o] for o in SUPPORTED_OPERATIONS[kind])}",
                     console.EXIT_USAGE)
        planned = [(kind, name, ops) for kind, name in resources]
    bindings = []
    for kind, name, ops in planned:
        pattern = ResourcePattern(kind, name, PatternType.LITERAL
                                  if kind == ResourceType.CLUSTER else pattern_type)
        for principals, hosts, permission in (
                (allow_principal, allow_host, AclPermissionType.ALLOW),
                (deny_principal, deny_host, AclPermissionType.DENY)):
            for principal in principals:
                for host in hosts or ["*"]:
                    for op in ops:
                        bindings.append(AclBinding(pattern, AccessControlEntry(
                            _principal(principal), host, op, permission)))
    errors = with_admin(bootstrap_server, lambda admin: admin.create_acls(bindings),
                        command_config=command_config)
    failed = [e for e in errors if e is not None]
    if failed:
        fail(str(failed[0]) + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""))
    _print(bindings, json_out)


def _filters(topics: list[str], groups: list[str], txn_ids: list[str], cluster: bool,
             pattern_type: PatternType, principals: list[str], hosts: list[str],
             operations: list[str]) -> list[AclBindingFilter]:
    resources: list[tuple[ResourceType, str | None]] = list(
        _resources(topics, groups, txn_ids, cluster))
    if not resources:
        resources = [(ResourceType.ANY, None)]
    ops = [operation_named(o) for o in operations] if operations else [OP.ANY]
    any_: list[str | None] = [None]
    return [AclBindingFilter(kind, name, pattern_type, principal, host, op)
            for kind, name in resources
            for principal in (list(principals) or any_)
            for host in (list(hosts) or any_)
            for op in ops]


_FILTER_PATTERNS = (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL,
                    PatternType.PREFIXED)


@acls_app.command("list")
def list_(
    topic: list[str] = _topic_option(),
    group: list[str] = _group_option(),
    transactional_id: list[str] = _txn_option(),
    cluster: bool = _cluster_option(),
    resource_pattern_type: str = _pattern_option("ANY"),
    principal: list[str] = typer.Option([], "--principal",
                                        help="Only this principal's ACLs (repeatable)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """List ACLs: all of them, or those of the named resources and principals."""
    pattern_type = _pattern_type(resource_pattern_type, _FILTER_PATTERNS)
    filters = _filters(topic, group, transactional_id, cluster, pattern_type,
                       [_principal(p) for p in principal], [], [])

    async def body(admin: AdminClient) -> list[AclBinding]:
        found: dict[AclBinding, None] = {}
        for f in filters:
            found.update(dict.fromkeys(await admin.describe_acls(f)))
        return list(found)

    _print(with_admin(bootstrap_server, body, command_config=command_config), json_out)


@acls_app.command("remove")
def remove(
    allow_principal: list[str] = typer.Option([], "--allow-principal",
                                              help="Only this principal's allows."),
    deny_principal: list[str] = typer.Option([], "--deny-principal",
                                             help="Only this principal's denies."),
    allow_host: list[str] = typer.Option([], "--allow-host", help="Only allows for this host."),
    deny_host: list[str] = typer.Option([], "--deny-host", help="Only denies for this host."),
    operation: list[str] = typer.Option([], "--operation", help="Only this operation."),
    topic: list[str] = _topic_option(),
    group: list[str] = _group_option(),
    transactional_id: list[str] = _txn_option(),
    cluster: bool = _cluster_option(),
    resource_pattern_type: str = _pattern_option("LITERAL"),
    force: bool = typer.Option(False, "--force", help="Do not ask for confirmation."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
) -> None:
    """Remove the ACLs of the named resources (all of theirs, or only the given
    principals', hosts' and operations')."""
    pattern_type = _pattern_type(resource_pattern_type, _FILTER_PATTERNS)
    if not _resources(topic, group, transactional_id, cluster):
        fail("name a resource: --topic, --group, --transactional-id or --cluster",
             console.EXIT_USAGE)
    try:
        filters: list[AclBindingFilter] = []
        if not allow_principal and not deny_principal:
            filters = _filters(topic, group, transactional_id, cluster, pattern_type, [],
                               allow_host + deny_host, operation)
        for principals, hosts, permission in (
                (allow_principal, allow_host, AclPermissionType.ALLOW),
                (deny_principal, deny_host, AclPermissionType.DENY)):
            if principals:
                filters += [AclBindingFilter(f.resource_type, f.name, f.pattern_type,
                                             f.principal, f.host, f.operation, permission)
                            for f in _filters(topic, group, transactional_id, cluster,
                                              pattern_type, [_principal(p) for p in principals],
                                              hosts, operation)]
    except ValueError as exc:
        fail(str(exc), console.EXIT_USAGE)
    if not force and not typer.confirm("Are you sure you want to remove these ACLs?"):
        fail("nothing removed", console.EXIT_USAGE)
    results = with_admin(bootstrap_server, lambda admin: admin.delete_acls(filters),
                         command_config=command_config)
    removed: list[AclBinding] = []
    for result in results:
        if isinstance(result, Exception):
            fail(str(result))
        removed.extend(result)
    _print(removed, json_out)


def register(app: typer.Typer) -> None:
    app.add_typer(acls_app)
