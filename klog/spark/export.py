"""``klog spark-export``: topic data to files through Spark, incrementally and exactly once.

This module owns the export job and its commit protocol. Output files are named as Kafka
Connect's S3 sink names them, ``<topic>+<partition>+<start offset>.<ext>`` (the start
offset zero-padded to 20 digits), under the ``--partition-by`` directories Spark makes
(``topic=orders/partition=0/...``). A checkpoint directory records the exported offset
ranges, so a rerun reads only what came after them.

Exactly once, across crashes (a run may die anywhere):

1. Recover first: a ``pending.json`` left by a run that died after Spark finished is rolled
   forward (its renames redone -- each is idempotent -- and its ranges recorded); then any
   staging directory is removed: data a dead run wrote but never committed is not output.
2. Plan the ranges: for each partition, from where the checkpoint ends (or the starting
   offsets) to the ending offsets resolved now, so the ranges are fixed before Spark runs.
3. Spark reads exactly those ranges and writes them into ``<output>/_klog_staging/<run>``;
   each task also leaves a stats file (its range, rows, bytes).
4. ``pending.json`` is written atomically: every rename (staging file -> final name) and
   the ranges. This is the commit point.
5. The renames run, the checkpoint's ranges are replaced atomically with the merged ones,
   pending.json and the staging directory are removed.

A crash before 4 leaves nothing in the output and nothing in the checkpoint: the next run
exports the same ranges again. A crash after 4 is finished by the next run. Final names are
a function of the range, so even a repeated rename cannot make a second copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klog.spark.options import OptionsError, parse_offsets_json, parse_options
from klog.storage.checkpoints import atomic_write_text
from klog.storage.properties import split_assignment

FORMATS = ("parquet", "json", "csv", "orc")
STAGING_DIR = "_klog_staging"
DEFAULT_CHECKPOINT_DIR = "_klog_checkpoint"
RANGES_FILE = "ranges.json"
PENDING_FILE = "pending.json"
CHECKPOINT_VERSION = 1
# Columns --partition-by may name besides the schema's own: derived from the timestamp.
DERIVED_COLUMNS = {"date": "to_date(timestamp)", "hour": "date_format(timestamp, 'yyyy-MM-dd-HH')"}
# Spark names a task's output part-<task>-<job uuid>.c<NNN><ext> (ext: .snappy.parquet, ...).
# Below this many offsets in all, a run is not split further to use every core.
MIN_SPLIT_RECORDS = 100_000
_PART_FILE = re.compile(r"^part-(\d+)-.+?[.-](c\d{3})(\..*)?$")


class ExportError(Exception):
    """The export cannot run or failed; the message is for the user (one line)."""


@dataclass
class ExportConfig:
    output: str
    source: str | None = None
    bootstrap_server: str | None = None
    topics: list[str] = field(default_factory=list)
    topic_pattern: str | None = None
    format: str = "parquet"
    partition_by: list[str] = field(default_factory=list)
    starting_offsets: str | None = None
    ending_offsets: str | None = None
    include_headers: bool = False
    master: str = "local[*]"
    checkpoint: str | None = None
    read_committed: bool = False
    # Spark configuration for the session (spark-submit's --conf), e.g. spark.driver.memory.
    conf: dict[str, str] = field(default_factory=dict)
    # Client security settings for a live cluster (Kafka's names), as kafka.* options.
    security: dict[str, str] = field(default_factory=dict)

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.checkpoint or Path(self.output) / DEFAULT_CHECKPOINT_DIR)


@dataclass
class PartitionSummary:
    topic: str
    partition: int
    start: int
    end: int
    rows: int = 0
    bytes: int = 0
    files: int = 0
    first_offset: int = -1
    last_offset: int = -1
    # Offsets deleted (retention, DeleteRecords) after the checkpoint's end before this run
    # could export them: [checkpoint end, log start offset). Spark's failOnDataLoss case.
    lost: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ExportResult:
    partitions: list[PartitionSummary]
    files: list[str]
    seconds: float
    recovered: bool
    # Time spent starting Spark (a JVM) in this run; not part of ``seconds``.
    startup_seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "spark_startup_seconds": round(self.startup_seconds, 3),
            "recovered_previous_run": self.recovered,
            "partitions": [p.to_dict() for p in self.partitions],
            "files": self.files,
        }


def _fault(point: str) -> None:
    """A place where a crash is simulated in tests (they replace this function)."""


# -- the checkpoint -----------------------------------------------------------------------


def _key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def _merge(ranges: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


class Checkpoint:
    """The exported ranges per partition (``ranges.json``) and a pending commit.

    Owned by one export at a time (nothing locks it: two concurrent exports to the same
    checkpoint are not supported).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ranges: dict[str, list[list[int]]] = {}
        path = directory / RANGES_FILE
        if path.exists():
            try:
                data = json.loads(path.read_text())
                self.ranges = {k: _merge(v) for k, v in data["partitions"].items()}
            except (ValueError, KeyError, TypeError) as exc:
                raise ExportError(f"checkpoint {path} is not readable: {exc}") from None

    def exported_end(self, topic: str, partition: int) -> int | None:
        ranges = self.ranges.get(_key(topic, partition))
        return ranges[-1][1] if ranges else None

    def record(self, new: dict[str, list[int]]) -> None:
        for key, r in new.items():
            self.ranges[key] = _merge([*self.ranges.get(key, []), r])
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            self.directory / RANGES_FILE,
            json.dumps({"version": CHECKPOINT_VERSION, "partitions": self.ranges}, indent=1),
        )


def _apply_pending(checkpoint: Checkpoint, pending: dict[str, Any]) -> None:
    """Finish a committed run: renames (idempotent) then ranges, then forget it."""
    for i, (src, dst) in enumerate(pending["moves"]):
        if os.path.exists(src):
            Path(dst).parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        elif not os.path.exists(dst):
            raise ExportError(f"pending commit lost {src} before it reached {dst}")
        if i == 0:
            _fault("moved-one")
    checkpoint.record(pending["ranges"])
    _fault("recorded")
    (checkpoint.directory / PENDING_FILE).unlink(missing_ok=True)


def recover(config: ExportConfig) -> bool:
    """Roll a committed but unfinished run forward and drop uncommitted staging data.
    True when there was a pending commit."""
    checkpoint = Checkpoint(config.checkpoint_dir)
    pending_path = config.checkpoint_dir / PENDING_FILE
    recovered = False
    if pending_path.exists():
        try:
            pending = json.loads(pending_path.read_text())
        except ValueError as exc:
            raise ExportError(f"{pending_path} is not readable: {exc}") from None
        _apply_pending(checkpoint, pending)
        recovered = True
    staging = Path(config.output) / STAGING_DIR
    if staging.exists():
        shutil.rmtree(staging)
    return recovered


# -- planning -------------------------------------------------------------------------------


def _source_options(config: ExportConfig) -> dict[str, str]:
    opts: dict[str, str] = {}
    if config.source is not None:
        opts["path"] = config.source
    if config.bootstrap_server is not None:
        opts["kafka.bootstrap.servers"] = config.bootstrap_server
    if config.topics:
        opts["subscribe"] = ",".join(config.topics)
    if config.topic_pattern is not None:
        opts["subscribePattern"] = config.topic_pattern
    if config.read_committed:
        opts["kafka.isolation.level"] = "read_committed"
    if config.include_headers:
        opts["includeHeaders"] = "true"
    opts.update({f"kafka.{k}": v for k, v in config.security.items()})
    return opts


def plan_ranges(config: ExportConfig, checkpoint: Checkpoint) -> list[PartitionSummary]:
    """The [start, end) to export per partition: what the checkpoint has not covered yet."""
    from klog.spark.plan import partition_offsets

    opts = _source_options(config)
    parsed = parse_options(opts)
    offsets, _files, _txns = partition_offsets(parsed)
    starting = (parse_offsets_json("--starting-offsets", config.starting_offsets)
                if config.starting_offsets else {})
    ending = (parse_offsets_json("--ending-offsets", config.ending_offsets)
              if config.ending_offsets else {})
    out = []
    for po in offsets:
        tp = (po.topic, po.partition)
        start = starting.get(tp, -2)
        start = po.earliest if start == -2 else start
        end = ending.get(tp, -1)
        end = po.latest if end == -1 else end
        done = checkpoint.exported_end(po.topic, po.partition)
        if done is not None:
            start = max(start, done)
        lost = po.earliest - done if done is not None and done < po.earliest else 0
        start = min(max(start, po.earliest), po.latest)
        end = min(max(end, start), po.latest)
        out.append(PartitionSummary(po.topic, po.partition, start, end, lost=lost))
    return out


# -- the run -------------------------------------------------------------------------------


def parse_conf(items: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (spark-submit's ``--conf``) as a mapping; the value is all after
    the first ``=`` and may be empty. Raises ExportError naming the first malformed one."""
    conf: dict[str, str] = {}
    for item in items:
        try:
            key, value = split_assignment(item)
        except ValueError:
            raise ExportError(
                f"--conf {item!r}: expected KEY=VALUE, e.g. spark.driver.memory=4g") from None
        conf[key] = value
    return conf


def session_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The builder settings of an export's session: klog's, then ``conf`` over them.

    ``spark.driver.extraJavaOptions`` is the one merged rather than replaced: klog's quiet
    log4j configuration stays first, the user's options after it (a later ``-D`` wins).
    """
    quiet = Path(__file__).with_name("log4j2.properties")
    out = {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={quiet}",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.sources.partitionOverwriteMode": "static",
        # pyspark's daemon, importing pyspark without recompiling it (see its docstring).
        "spark.python.daemon.module": "klog.spark.pydaemon",
    }
    for key, value in (conf or {}).items():
        if key == "spark.driver.extraJavaOptions" and value.strip():
            out[key] = f"{out[key]} {value.strip()}"
        else:
            out[key] = value
    return out


def spark_session(master: str, conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession for the export (an existing one with the same master is reused).

    ``conf`` (spark-submit's ``--conf``) goes to the builder over klog's own settings. As
    with spark-submit, settings of the JVM (``spark.driver.memory``, ...) take effect only
    when this call starts it; a reused session takes the runtime (SQL) settings only.
    """
    # Python workers must run this interpreter: it has klog and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("klog spark-export")
    for key, value in session_conf(conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    # As klog/spark/log4j2.properties: a failed job is reported by klog in one line.
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def _final_name(stats: dict[str, Any], name: str) -> str | None:
    match = _PART_FILE.match(name)
    if match is None:
        return None
    chunk, suffix = match.group(2), match.group(3) or ""
    base = f"{stats['topic']}+{stats['partition']}+{stats['start']:020d}"
    return f"{base}{suffix}" if chunk == "c000" else f"{base}.{chunk}{suffix}"


def _watch_progress(spark: Any, total: int, advance: Callable[[int], None],
                    stop: threading.Event) -> None:
    tracker = spark.sparkContext.statusTracker()
    shown = 0
    while not stop.wait(0.3):
        done = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
        done = min(done, total)
        if done > shown:
            advance(done - shown)
            shown = done


def run_export(
    config: ExportConfig,
    *,
    spark: Any = None,
    progress: Callable[[int], Any] | None = None,
) -> ExportResult:
    """Export what the checkpoint has not covered; see the module docstring.

    ``progress(total_tasks)`` is a context manager factory yielding ``advance(n)``.
    """
    if config.format not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, not {config.format}")
    began = time.monotonic()
    recovered = recover(config)
    checkpoint = Checkpoint(config.checkpoint_dir)
    try:
        planned = plan_ranges(config, checkpoint)
    except OptionsError as exc:
        raise ExportError(str(exc)) from None
    todo = [p for p in planned if p.end > p.start]
    if not todo:
        return ExportResult(planned, [], time.monotonic() - began, recovered)
    run_id = uuid.uuid4().hex[:12]
    output = Path(config.output)
    staging = output / STAGING_DIR / run_id
    stats_dir = staging / "_stats"
    data_dir = staging / "data"
    stats_dir.mkdir(parents=True)
    startup = 0.0
    if spark is None:
        t = time.monotonic()
        spark = spark_session(config.master, config.conf)
        startup = time.monotonic() - t
    from klog.spark import register

    register(spark)
    opts = _source_options(config)
    opts.pop("subscribe", None)
    opts.pop("subscribePattern", None)
    opts["assign"] = json.dumps(_by_topic({(p.topic, p.partition): p.partition for p in todo},
                                          listed=True))
    opts["startingOffsets"] = json.dumps(_by_topic({(p.topic, p.partition): p.start
                                                    for p in todo}))
    opts["endingOffsets"] = json.dumps(_by_topic({(p.topic, p.partition): p.end for p in todo}))
    opts["klog.statsDir"] = str(stats_dir)
    # At least one task per core when there is enough to share: a single big partition
    # must not run on one core (small ranges stay whole: one file each).
    if sum(p.end - p.start for p in todo) >= MIN_SPLIT_RECORDS:
        opts["minPartitions"] = str(max(1, int(spark.sparkContext.defaultParallelism)))
    df = spark.read.format("klog").options(**opts).load()
    df = _shape(df, config)
    writer = df.write.mode("errorifexists").format(config.format)
    if config.partition_by:
        writer = writer.partitionBy(*config.partition_by)
    if config.format == "csv":
        writer = writer.option("header", "true")
    stop = threading.Event()
    if progress is not None:
        from klog.spark.plan import plan_tasks

        n_tasks = len(plan_tasks(parse_options(opts)))  # the bar's total
        with progress(n_tasks) as advance:
            watcher = threading.Thread(
                target=_watch_progress, args=(spark, n_tasks, advance, stop), daemon=True)
            watcher.start()
            try:
                _write(writer, data_dir)
            finally:
                stop.set()
                watcher.join()
    else:
        _write(writer, data_dir)
    _fault("written")
    stats = {}
    for path in stats_dir.glob("*.json"):
        s = json.loads(path.read_text())
        stats[int(s["index"])] = s
    moves: list[list[str]] = []
    for root, _dirs, names in os.walk(data_dir):
        for name in names:
            if name.startswith(("_", ".")) or name.endswith(".crc"):
                continue  # _SUCCESS, checksums
            match = _PART_FILE.match(name)
            if match is None:
                # Never commit ranges whose rows sit in a file this code does not understand.
                raise ExportError(f"Spark wrote {name}, which is not named as expected")
            s = stats.get(int(match.group(1)))
            if s is None:
                raise ExportError(f"Spark wrote {name} but its task left no statistics")
            if not s.get("rows"):
                continue  # an empty task's file holds nothing worth a name
            rel = Path(root).relative_to(data_dir)
            dst = output / rel / (_final_name(s, name) or name)
            moves.append([str(Path(root) / name), str(dst)])
    summaries = {(p.topic, p.partition): p for p in todo}
    for s in stats.values():
        p = summaries[(s["topic"], s["partition"])]
        p.rows += s.get("rows", 0)
        p.bytes += s.get("bytes", 0)
        if s.get("rows"):
            p.first_offset = (s["first_offset"] if p.first_offset < 0
                              else min(p.first_offset, s["first_offset"]))
            p.last_offset = max(p.last_offset, s["last_offset"])
    for src, _dst in moves:
        # Our own writer named these files, so each matches.
        match = _PART_FILE.match(Path(src).name)
        assert match is not None
        index = int(match.group(1))
        s = stats[index]
        summaries[(s["topic"], s["partition"])].files += 1
    pending = {
        "run": run_id,
        "moves": moves,
        "ranges": {_key(p.topic, p.partition): [p.start, p.end] for p in todo},
    }
    config.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config.checkpoint_dir / PENDING_FILE, json.dumps(pending))
    _fault("committed")
    _apply_pending(checkpoint, pending)
    shutil.rmtree(output / STAGING_DIR, ignore_errors=True)
    return ExportResult(planned, sorted(dst for _src, dst in moves),
                        time.monotonic() - began - startup, recovered, startup)


# The error line a Python worker's traceback ends with, when it is one of ours.
_WORKER_ERROR = re.compile(
    r"^\s*(?:[\w.]+\.)?((?:Offline|Live|Options|CorruptRecord|RecordTooLarge|Export)Error): (.+)$")


def spark_error_line(exc: BaseException) -> str:
    """One line for the user out of a Spark exception (which carries a JVM stack and a
    Python worker's traceback): our own error when a worker raised one, else the first."""
    text = str(exc).strip()
    for line in reversed(text.splitlines()):
        match = _WORKER_ERROR.match(line)
        if match:
            return f"{match.group(1)}: {match.group(2).strip()}"
    return text.splitlines()[0] if text else type(exc).__name__


def _write(writer: Any, data_dir: Path) -> None:
    try:
        writer.save(str(data_dir))
    except Exception as exc:
        raise ExportError(f"Spark failed: {spark_error_line(exc)}") from exc


def _by_topic(values: dict[tuple[str, int], int], *, listed: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (topic, partition), value in sorted(values.items()):
        if listed:
            out.setdefault(topic, []).append(partition)
        else:
            out.setdefault(topic, {})[str(partition)] = value
    return out


def _shape(df: Any, config: ExportConfig) -> Any:
    from pyspark.sql import functions as F

    for name in config.partition_by:
        if name in DERIVED_COLUMNS:
            df = df.withColumn(name, F.expr(DERIVED_COLUMNS[name]))
        elif name not in df.columns:
            raise ExportError(
                f"--partition-by {name}: not a column (columns: {', '.join(df.columns)}; "
                f"derived: {', '.join(DERIVED_COLUMNS)})")
    if config.format == "csv":
        # CSV holds neither binary nor arrays: bytes as base64, headers as JSON.
        df = df.withColumn("key", F.base64("key")).withColumn("value", F.base64("value"))
        if "headers" in df.columns:
            df = df.withColumn(
                "headers",
                F.to_json(F.transform("headers", lambda h: F.struct(
                    h["key"].alias("key"), F.base64(h["value"]).alias("value")))))
    return df
