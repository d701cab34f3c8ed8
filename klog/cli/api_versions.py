"""``klog api-versions``: the API versions each broker serves (kafka-broker-api-versions.sh).

Formatting only: the versions are what each broker announced in ApiVersions (klog's client
connects to every broker of the cluster). The text is Kafka's tool's:

    127.0.0.1:9092 (id: 0 rack: null) -> (
        Produce(0): 3 to 9 [usable: 9],
        ...
        ConsumerGroupHeartbeat(68): UNSUPPORTED,
    )

(each API line starts with a tab). "usable" is the highest version both this client and
the broker speak; an API this client knows and the broker does not announce is
UNSUPPORTED. ``--json`` prints one document.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from klog.cli import console
from klog.cli.topic import bootstrap_option, command_config_option, json_option, with_admin

if TYPE_CHECKING:
    from klog.client.admin import AdminClient


def _name(api_key: int) -> str:
    from klog.protocol import apis

    spec = apis.API_TABLE.get(api_key)
    return spec.name if spec is not None else "UNKNOWN"


def describe_versions(ours: dict[int, tuple[int, int]], theirs: dict[int, tuple[int, int]]
                      ) -> list[dict[str, Any]]:
    """Per API (sorted by key): name, the broker's range (None: unsupported), usable."""
    rows = []
    for key in sorted(set(ours) | set(theirs)):
        broker = theirs.get(key)
        usable = None
        if broker is not None and key in ours:
            top = min(broker[1], ours[key][1])
            usable = top if top >= max(broker[0], ours[key][0]) else None
        rows.append({"api_key": key, "name": _name(key),
                     "min_version": None if broker is None else broker[0],
                     "max_version": None if broker is None else broker[1],
                     "usable": usable})
    return rows


def api_versions(
    bootstrap_server: str | None = bootstrap_option(),
    command_config: Path | None = command_config_option(),
    as_json: bool = json_option(),
) -> None:
    """Show the API versions every broker of the cluster serves."""
    from klog.protocol import apis

    ours = {key: (spec.min_version, spec.max_version) for key, spec in apis.API_TABLE.items()}

    async def body(admin: AdminClient) -> list[dict[str, Any]]:
        metadata = await admin.client.refresh_metadata([])
        out = []
        for node_id, meta in sorted(metadata.brokers.items()):
            theirs = await admin.client.api_versions_of(node_id)
            out.append({"id": node_id, "host": meta.host, "port": meta.port,
                        "rack": meta.rack, "apis": describe_versions(ours, theirs)})
        return out

    brokers = with_admin(bootstrap_server, body, command_config=command_config)
    if as_json:
        console.emit_json({"brokers": brokers})
        return
    for b in brokers:
        console.raw(f"{b['host']}:{b['port']} (id: {b['id']} rack: "
                    f"{b['rack'] if b['rack'] is not None else 'null'}) -> (\n")
        for row in b["apis"]:
            label = f"\t{row['name']}({row['api_key']}): "
            if row["max_version"] is None:
                console.raw(label + "UNSUPPORTED,\n")
            else:
                usable = "NONE" if row["usable"] is None else row["usable"]
                console.raw(label + f"{row['min_version']} to {row['max_version']} "
                            f"[usable: {usable}],\n")
        console.raw(")\n")


def register(app: typer.Typer) -> None:
    app.command("api-versions")(api_versions)
