"""``klog compact``: the broker's log cleaner over a stopped broker's log dirs.

The cleaning is ``klog.tools.compact``'s; this module decides which topics are compacted
(their configs from the directory's own standalone metadata, from ZooKeeper with
``--zookeeper-connect``, or named with ``--topic``), shows progress, and prints a table or
``--json``. It is at the assembly level because reading topic configs needs the metadata
formats of ``klog.daemon.metastore``; the standalone store is read here without opening it
(opening it takes its lock and expires dead sessions: a write).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from klog.cli import console

# The directory a standalone broker keeps its metadata in, beside its partitions
# (klog.daemon.broker.METASTORE_DIR; not imported: that module pulls in the whole broker).
METASTORE_DIR = ".klog-metastore"

_HELP = (
    "Compact the partitions of compacted topics in the log dirs of a stopped broker, as the "
    "broker's log cleaner would: keep the latest record of each key, drop tombstones once "
    "delete.retention.ms has passed since they were first cleaned. Topics are compacted "
    "when their cleanup.policy says so (read from the directory's standalone metadata, or "
    "from ZooKeeper with --zookeeper-connect), when named with --topic, and always for "
    "__consumer_offsets. Refuses a log dir that a running broker holds or that was not "
    "shut down cleanly. Beyond Kafka, which has no offline cleaner."
)


# --------------------------------------------------------------------------- topic configs


class MetadataError(Exception):
    pass


def read_local_nodes(directory: Path) -> dict[str, bytes]:
    """Path -> data of every node of a standalone metadata store, read-only (the store's
    own parser of its files, without opening it: opening takes its lock)."""
    from klog.daemon.metastore.base import MetastoreCorruptError
    from klog.daemon.metastore.local_format import read_nodes

    try:
        return read_nodes(directory)
    except MetastoreCorruptError as exc:
        raise MetadataError(str(exc)) from None


def _config_of(data: bytes) -> dict[str, str]:
    doc = json.loads(data or b"{}")
    config = doc.get("config", {}) if isinstance(doc, dict) else {}
    return {str(k): str(v) for k, v in config.items()}


def _topic_config_root() -> str:
    from klog.daemon.metastore.paths import CONFIG_TYPE_TOPIC, config_entity_type_path

    return config_entity_type_path(CONFIG_TYPE_TOPIC)  # /config/topics


def local_topic_configs(log_dir: Path) -> dict[str, dict[str, str]]:
    """Topic -> config overrides from ``<log_dir>/.klog-metastore`` ({} when absent)."""
    directory = log_dir / METASTORE_DIR
    if not directory.is_dir():
        return {}
    prefix = _topic_config_root() + "/"
    return {
        path[len(prefix):]: _config_of(data)
        for path, data in read_local_nodes(directory).items()
        if path.startswith(prefix) and "/" not in path[len(prefix):]
    }


def zookeeper_topic_configs(connect: str, timeout: float = 15.0) -> dict[str, dict[str, str]]:
    """Topic -> config overrides from ZooKeeper's /config/topics (Kafka's layout)."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    client = KazooClient(hosts=connect, read_only=True)
    try:
        client.start(timeout=timeout)
    except Exception as exc:
        raise MetadataError(f"cannot reach ZooKeeper at {connect}: {exc}") from None
    try:
        try:
            topics = client.get_children(_topic_config_root())
        except NoNodeError:
            return {}
        out = {}
        for topic in topics:
            try:
                data, _stat = client.get(f"{_topic_config_root()}/{topic}")
            except NoNodeError:
                continue
            out[topic] = _config_of(data)
        return out
    finally:
        client.stop()
        client.close()


# --------------------------------------------------------------------------- output


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _print(report: Any) -> None:
    if report.dry_run:
        console.line("dry run: nothing was changed; figures are what one pass would do")
    shown = [p for p in report.partitions if p.error or not p.skipped]
    widest = max((len(p.partition) for p in shown), default=9)
    table = Table(show_edge=False, pad_edge=False)
    # Few, narrow columns (80 terminal columns hold them with a 40-character partition
    # name); the rest is in --json. An error's words go below the table.
    for name, justify in (("partition", "left"), ("before", "right"), ("after", "right"),
                          ("records", "right"), ("removed", "right"), ("status", "left")):
        table.add_column(name, justify=justify, no_wrap=True,  # type: ignore[arg-type]
                         min_width=widest if name == "partition" else None)
    for p in shown:
        table.add_row(
            Text(p.partition), _size(p.bytes_before), _size(p.bytes_after),
            str(p.records_read), str(p.records_removed),
            Text("error", style="bold red") if p.error else Text("ok", style="green"),
        )
    if shown:
        console.out.print(table)
    summary = report.to_dict()
    done = sum(1 for p in shown if not p.error)
    clean = sum(1 for p in report.partitions if p.skipped == "nothing dirty to clean")
    other = sum(1 for p in report.partitions if p.skipped == "not a compacted topic")
    console.line(
        f"{done} partitions {'would be ' if report.dry_run else ''}compacted: "
        f"{_size(summary['bytes_before'])} -> {_size(summary['bytes_after'])}, "
        f"{summary['records_removed']} records removed "
        f"({sum(p.tombstones_removed for p in shown)} tombstones); {clean} with nothing dirty, "
        f"{other} of topics not compacted"
    )


# --------------------------------------------------------------------------- command


def compact_command(
    log_dirs: list[Path] = typer.Argument(
        ..., help="Log dirs of a stopped broker (or partition dirs in one).", metavar="LOG_DIR...",
        show_default=False,
    ),
    topic: list[str] = typer.Option(
        [], "--topic", help="Compact this topic too (repeatable), whatever its config says.",
        show_default=False,
    ),
    zookeeper_connect: str | None = typer.Option(
        None, "--zookeeper-connect", "-z",
        help="Read topic configs from this ZooKeeper (a cluster's broker).", show_default=False,
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Change nothing; report what would be removed."
    ),
    roll: bool = typer.Option(
        False, "--roll",
        help="Close each active segment first so that it can be cleaned too (a broker "
        "never cleans its active segment).",
    ),
    dedupe_buffer_size: int = typer.Option(
        128 * 1024 * 1024, "--dedupe-buffer-size", min=24,
        help="Bytes of the offset map (log.cleaner.dedupe.buffer.size): 24 per key.",
    ),
    json_: bool = typer.Option(False, "--json", help="One JSON document for scripts."),
) -> None:
    """Compact the partitions of compacted topics in a stopped broker's log dirs."""
    from klog.storage.config import LogConfig, LogConfigError
    from klog.tools import compact as lib
    from klog.tools.verify import LogDirLockedError

    try:
        if zookeeper_connect:
            raw = zookeeper_topic_configs(zookeeper_connect)
        else:
            raw = {}
            for path in log_dirs:
                for log_dir in (path, path.parent):
                    raw.update(local_topic_configs(log_dir))
        configs = {
            t: LogConfig.from_properties(props, ignore_unknown=True) for t, props in raw.items()
        }
    except (MetadataError, LogConfigError, OSError, ValueError, KeyError) as exc:
        console.fail_now(f"cannot read topic configs: {exc}", console.EXIT_USAGE)
    policy = lib.compaction_policy(tuple(topic), configs)
    try:
        total = lib.log_bytes(log_dirs)
        with console.progress("compacting", 2 * total) as advance:
            report = lib.compact(log_dirs, policy, dry_run=dry_run, roll=roll,
                                 dedupe_buffer_size=dedupe_buffer_size, progress=advance)
    except lib.CompactError as exc:
        console.fail_now(str(exc), console.EXIT_USAGE)
    except LogDirLockedError as exc:
        console.fail_now(str(exc))
    except OSError as exc:
        console.fail_now(f"{exc.filename or log_dirs[0]}: {exc.strerror or exc}")
    if json_:
        console.emit_json(report.to_dict())
    else:
        _print(report)
        for p in report.partitions:
            if p.error:
                console.warn(f"{p.partition}: not compacted: {p.error}")
    console.exit_now(console.EXIT_DAMAGE if report.failed else console.EXIT_OK)


def register(app: typer.Typer) -> None:
    """Add ``compact`` to ``app``."""
    app.command("compact", help=_HELP)(compact_command)
