"""``klog spark-export``: formatting over ``klog.spark.export`` (the job lives there).

Progress bar while Spark runs (stderr, terminals only), then a summary table per partition
(rows, bytes, exported offset range, files) or, with ``--json``, one JSON document.
Failures are one ``error:`` line and exit status 1; usage errors exit 2.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from klog.cli import console


def register(app: typer.Typer) -> None:
    """Add ``spark-export`` to ``app``."""
    app.command(
        "spark-export",
        help=(
            "Export topic data to Parquet/JSON/CSV/ORC files with Spark, from a log directory "
            "or a live cluster; incremental and exactly once through a checkpoint."
        ),
        no_args_is_help=True,
    )(spark_export)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _print_summary(result: Any) -> None:
    table = Table(title=None, show_edge=False, header_style="bold")
    for column in ("topic", "partition", "offsets", "rows", "bytes", "files"):
        table.add_column(column, justify="left" if column in ("topic", "offsets") else "right")
    for p in sorted(result.partitions, key=lambda p: (p.topic, p.partition)):
        offsets = f"[{p.start}, {p.end})" if p.end > p.start else f"up to date at {p.end}"
        table.add_row(p.topic, str(p.partition), offsets, str(p.rows), _human(p.bytes),
                      str(p.files))
    console.out.print(table)
    rate = result.rows / result.seconds if result.seconds > 0 else 0.0
    startup = (f" (+ {result.startup_seconds:.1f} s starting Spark)"
               if result.startup_seconds >= 0.05 else "")
    console.out.print(
        f"exported {result.rows} rows ({_human(result.bytes)}) in {len(result.files)} files "
        f"in {result.seconds:.1f} s{startup}, {rate:,.0f} rows/s", markup=False)


def spark_export(
    output: str = typer.Option(..., "--output", "-o", help="Directory the files go to."),
    source: str = typer.Option(None, "--source", help="A log directory (offline; no broker)."),
    bootstrap_server: str = typer.Option(
        None, "--bootstrap-server", help="HOST:PORT of a live cluster."),
    topic: list[str] = typer.Option(None, "--topic", help="A topic to export (repeatable)."),
    topic_pattern: str = typer.Option(
        None, "--topic-pattern", help="A regular expression matching whole topic names."),
    format_: str = typer.Option("parquet", "--format", help="parquet, json, csv or orc."),
    partition_by: str = typer.Option(
        None, "--partition-by",
        help="Comma-separated columns for output directories, e.g. topic,partition or date."),
    starting_offsets: str = typer.Option(
        None, "--starting-offsets",
        help='Spark\'s JSON, e.g. {"orders":{"0":100,"1":-2}} (-2 earliest).'),
    ending_offsets: str = typer.Option(
        None, "--ending-offsets", help='Spark\'s JSON, e.g. {"orders":{"0":500}} (-1 latest).'),
    include_headers: bool = typer.Option(
        False, "--include-headers", help="Add the headers column."),
    read_committed: bool = typer.Option(
        False, "--read-committed", help="Skip aborted transactions (isolation read_committed)."),
    master: str = typer.Option(
        "local[*]", "--master", help="Spark master URL (local[*], spark://HOST:7077, ...)."),
    checkpoint: str = typer.Option(
        None, "--checkpoint",
        help="Checkpoint directory of exported ranges (default: OUTPUT/_klog_checkpoint)."),
    conf: list[str] = typer.Option(
        None, "--conf", metavar="KEY=VALUE",
        help="A Spark setting, as spark-submit's --conf (repeatable), "
             "e.g. spark.driver.memory=4g."),
    json_: bool = typer.Option(False, "--json", help="One JSON document for scripts."),
    command_config: Path = typer.Option(
        None, "--command-config",
        help="Client security settings for --bootstrap-server (as Kafka's tools take "
             "them): handed to the klog data source as kafka.* options."),
) -> None:
    """Export topic data with Spark."""
    if command_config is not None and bootstrap_server is None:
        console.fail_now("--command-config goes with --bootstrap-server", console.EXIT_USAGE)
    security: dict[str, str] = {}
    if command_config is not None:
        from klog.cli.topic import load_client_security
        from klog.client.security import KNOWN_SETTINGS
        from klog.storage.properties import parse_properties

        load_client_security(command_config)  # one clear line for a file it cannot use
        security = {k: v for k, v in parse_properties(command_config.read_text()).items()
                    if k in KNOWN_SETTINGS}
    if (source is None) == (bootstrap_server is None):
        console.fail_now("give exactly one of --source DIR or --bootstrap-server HOST:PORT",
              console.EXIT_USAGE)
    if bool(topic) == (topic_pattern is not None):
        console.fail_now("give --topic (one or more) or --topic-pattern", console.EXIT_USAGE)
    try:
        from klog.spark.export import FORMATS, ExportConfig, ExportError, parse_conf, run_export
        from klog.spark.live import LiveError
        from klog.spark.offline import OfflineError
        from klog.spark.options import OptionsError
    except ImportError as exc:  # pyspark / pyarrow missing
        console.fail_now(f"spark-export needs the spark extra (pip install 'klog[spark]'): {exc}")
    if format_ not in FORMATS:
        console.fail_now(f"--format must be one of {', '.join(FORMATS)}, not {format_}",
              console.EXIT_USAGE)
    try:
        spark_conf = parse_conf(conf or [])
    except ExportError as exc:
        console.fail_now(str(exc), console.EXIT_USAGE)
    config = ExportConfig(
        output=output,
        source=source,
        bootstrap_server=bootstrap_server,
        topics=list(topic or []),
        topic_pattern=topic_pattern,
        format=format_,
        partition_by=[c.strip() for c in (partition_by or "").split(",") if c.strip()],
        starting_offsets=starting_offsets,
        ending_offsets=ending_offsets,
        include_headers=include_headers,
        master=master,
        checkpoint=checkpoint,
        read_committed=read_committed,
        conf=spark_conf,
        security=security,
    )

    @contextmanager
    def progress(total: int) -> Any:
        with console.progress("exporting (Spark tasks)", total, bytes_=False) as advance:
            yield advance

    try:
        result = run_export(config, progress=None if json_ else progress)
    except ExportError as exc:
        console.fail_now(str(exc))
    except (OfflineError, LiveError, OptionsError) as exc:  # ours: the message says it all
        console.fail_now(str(exc).strip().splitlines()[0] if str(exc).strip()
                         else type(exc).__name__)
    except Exception as exc:  # offline/live read errors surface through Spark
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        console.fail_now(f"{type(exc).__name__}: {first}")
    for p in result.partitions:
        if p.lost:
            console.warn(f"{p.topic}-{p.partition}: {p.lost} records after the checkpoint "
                         f"were deleted from the log before they could be exported")
    if json_:
        console.emit_json(result.to_dict())
    else:
        _print_summary(result)
