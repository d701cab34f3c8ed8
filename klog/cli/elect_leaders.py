"""``klog elect-leaders``: preferred or unclean leader election (kafka-leader-election.sh).

Formatting only: the election is the controller's (ElectLeaders through
klog.client.admin.AdminClient.elect_leaders). Same flags as Kafka's tool
(--bootstrap-server, --admin.config, --election-type, one of --all-topic-partitions /
--topic with --partition / --path-to-json-file) and the same lines:

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <error>

then "N replica(s) could not be elected" on stderr and exit status 1 when any failed.
``--json`` prints the same as one document instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from klog.cli import console
from klog.cli.topic import (
    bootstrap_option,
    fail,
    json_option,
    load_client_security,
    with_admin,
)

if TYPE_CHECKING:
    from klog.client.admin import AdminClient
    from klog.client.errors import KafkaClientError

ELECTION_NOT_NEEDED = 84
_TIMEOUT_KEYS = ("default.api.timeout.ms", "request.timeout.ms")


def parse_election_json(text: str, source: str = "JSON file") -> list[tuple[str, int]]:
    """``{"partitions": [{"topic": "foo", "partition": 1}, ...]}`` -> partitions, with
    Kafka's checks: the document must have "partitions"; no partition twice."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError("Replica election data is empty" if doc is None else
                         f"{source}: expected a JSON object with \"partitions\"")
    if "partitions" not in doc:
        raise ValueError("Replica election data is missing \"partitions\" field")
    items = doc["partitions"]
    if not isinstance(items, list):
        raise ValueError(f"{source}: \"partitions\" must be a list")
    out: list[tuple[str, int]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"{source}: partition entry {item!r} is not an object")
        topic, partition = item.get("topic"), item.get("partition")
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(
                partition, bool):
            raise ValueError(f"{source}: partition entry {item!r} needs a string \"topic\" "
                             f"and an integer \"partition\"")
        out.append((topic, partition))
    dupes = sorted({tp for tp in out if out.count(tp) > 1})
    if dupes:
        raise ValueError("Replica election data contains duplicate partitions: "
                         + ",".join(f"{t}-{p}" for t, p in dupes))
    return out


def classify(results: dict[tuple[str, int], KafkaClientError | None]
             ) -> tuple[list[tuple[str, int]], list[tuple[str, int]],
                        list[tuple[tuple[str, int], KafkaClientError]]]:
    """(elected, not needed, failed) in partition order."""
    succeeded, noop, failed = [], [], []
    for tp in sorted(results):
        error = results[tp]
        if error is None:
            succeeded.append(tp)
        elif error.error_code == ELECTION_NOT_NEEDED:
            noop.append(tp)
        else:
            failed.append((tp, error))
    return succeeded, noop, failed


def _name(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


def report_lines(election_type: str, results: dict[tuple[str, int], KafkaClientError | None]
                 ) -> list[str]:
    """kafka-leader-election.sh's stdout lines for ``results``."""
    kind = election_type.upper()
    succeeded, noop, failed = classify(results)
    lines = []
    if succeeded:
        lines.append(f"Successfully completed leader election ({kind}) for partitions "
                     + ", ".join(_name(tp) for tp in succeeded))
    if noop:
        lines.append("Valid replica already elected for partitions "
                     + ", ".join(_name(tp) for tp in noop))
    for tp, error in failed:
        lines.append(f"Error completing leader election ({kind}) for partition: "
                     f"{_name(tp)}: {error}")
    return lines


def report_json(election_type: str, results: dict[tuple[str, int], KafkaClientError | None]
                ) -> dict[str, Any]:
    succeeded, noop, failed = classify(results)

    def tp_json(tp: tuple[str, int]) -> dict[str, Any]:
        return {"topic": tp[0], "partition": tp[1]}

    return {
        "election_type": election_type.upper(),
        "succeeded": [tp_json(tp) for tp in succeeded],
        "not_needed": [tp_json(tp) for tp in noop],
        "failed": [{**tp_json(tp), "error": error.name, "message": str(error)}
                   for tp, error in failed],
    }


def _admin_timeout(path: Path | None) -> int:
    """--admin.config: the admin client's request timeout (its security settings are
    load_client_security's; others are ignored with a warning there)."""
    if path is None:
        return 30000
    from klog.storage.properties import parse_properties

    try:
        props = parse_properties(path.read_text())
    except (OSError, ValueError) as exc:
        fail(f"--admin.config {path}: {exc}", console.EXIT_USAGE)
    timeout = 30000
    for key, value in props.items():
        if key in _TIMEOUT_KEYS:
            try:
                timeout = int(value)
            except ValueError:
                fail(f"--admin.config {path}: {key}={value!r} is not a number",
                     console.EXIT_USAGE)
    return timeout


def elect_leaders(
    election_type: str = typer.Option(
        None, "--election-type",
        help="preferred (move leadership back to the first replica) or unclean (elect a "
             "leader for partitions without one, from any live replica). REQUIRED."),
    all_topic_partitions: bool = typer.Option(
        False, "--all-topic-partitions",
        help="Every partition (for preferred: those whose leader is not the preferred one)."),
    topic: str | None = typer.Option(
        None, "--topic", help="The topic of the one partition to elect (with --partition)."),
    partition: int | None = typer.Option(
        None, "--partition", help="The partition to elect (with --topic)."),
    path_to_json_file: Path | None = typer.Option(
        None, "--path-to-json-file",
        help='Partitions to elect: {"partitions": [{"topic": "foo", "partition": 1}]}.'),
    admin_config: Path | None = typer.Option(
        None, "--admin.config",
        help="A properties file for the admin client (request.timeout.ms)."),
    json_out: bool = json_option(),
    bootstrap_server: str | None = bootstrap_option(),
) -> None:
    """Elect partition leaders: back to the preferred replica, or unclean."""
    if election_type is None:
        fail("Missing required option(s): --election-type", console.EXIT_USAGE)
    kind = election_type.lower()
    if kind not in ("preferred", "unclean"):
        fail(f"unknown election type {election_type!r}: preferred or unclean",
             console.EXIT_USAGE)
    chosen = sum((topic is not None, all_topic_partitions, path_to_json_file is not None))
    if chosen != 1:
        fail("One and only one of the following options is required: --topic, "
             "--all-topic-partitions, --path-to-json-file", console.EXIT_USAGE)
    if topic is not None and partition is None:
        fail("Missing required option(s): --partition", console.EXIT_USAGE)
    if topic is None and partition is not None:
        fail("Option --partition is only allowed if --topic is used", console.EXIT_USAGE)
    tps: list[tuple[str, int]] | None = None
    if path_to_json_file is not None:
        try:
            text = path_to_json_file.read_text()
        except OSError as exc:
            fail(f"cannot read {path_to_json_file}: {exc.strerror or exc}", console.EXIT_USAGE)
        try:
            tps = parse_election_json(text, str(path_to_json_file))
        except ValueError as exc:
            fail(str(exc), console.EXIT_USAGE)
    elif topic is not None:
        assert partition is not None
        tps = [(topic, partition)]
    timeout_ms = _admin_timeout(admin_config)

    async def body(admin: AdminClient) -> dict[tuple[str, int], KafkaClientError | None]:
        return await admin.elect_leaders(kind, tps)

    security = load_client_security(admin_config, "--admin.config",
                                    also=frozenset({*_TIMEOUT_KEYS, "bootstrap.servers"}))
    results = with_admin(bootstrap_server, body, timeout_ms=timeout_ms, security=security)
    failed = classify(results)[2]
    if json_out:
        console.emit_json(report_json(kind, results))
    else:
        for text_line in report_lines(kind, results):
            console.line(text_line)
    if failed:
        fail(f"{len(failed)} replica(s) could not be elected")


def register(app: typer.Typer) -> None:
    app.command("elect-leaders")(elect_leaders)
