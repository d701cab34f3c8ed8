"""klog spark-export (klog.spark.export and its CLI) in local[2] Spark: the corpus, file
naming, incremental reruns, crashes at every step of the commit followed by a rerun, the
formats, --json and errors."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.spark import export
from klog.spark.export import ExportConfig, run_export
from klog.storage.log import PartitionLog
from tests.storage.batches import build_batch

pytestmark = pytest.mark.timeout(300)
runner = CliRunner()


def _append(log_dir: Path, topic: str, partition: int, base: int, n: int) -> None:
    log = PartitionLog(log_dir / f"{topic}-{partition}")
    try:
        log.append_as_follower(build_batch(base, [b"%s-%d-%d" % (topic.encode(), partition, o)
                                                  for o in range(base, base + n)]))
        log.flush()
    finally:
        log.close()


def _offsets(spark: Any, output: Path, fmt: str = "parquet") -> list[tuple[str, int, int]]:
    files = [str(p) for p in output.rglob(f"*.{fmt}")]
    if not files:
        return []
    # basePath: columns that --partition-by moved into directory names come back.
    reader = spark.read.format(fmt).option("basePath", str(output))
    rows = reader.load(files).select("topic", "partition", "offset").collect()
    return sorted((r["topic"], int(r["partition"]), r["offset"]) for r in rows)


def test_corpus_export(spark: Any, kafka_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_export(ExportConfig(output=str(out), source=str(kafka_corpus),
                                     topics=["first_topic"], partition_by=["topic", "partition"]),
                        spark=spark)
    assert result.rows == 41
    assert {(p.partition, p.start, p.end, p.rows, p.files) for p in result.partitions} == {
        (0, 0, 11, 11, 1), (1, 0, 12, 12, 1), (2, 0, 18, 18, 1)}
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.parquet"))
    assert names == [
        f"topic=first_topic/partition={p}/first_topic+{p}+{0:020d}.snappy.parquet"
        for p in range(3)]
    df = spark.read.parquet(str(out / "topic=first_topic"))
    assert df.count() == 41
    assert not (out / export.STAGING_DIR).exists()
    ranges = json.loads((out / "_klog_checkpoint" / "ranges.json").read_text())["partitions"]
    assert ranges == {"first_topic/0": [[0, 11]], "first_topic/1": [[0, 12]],
                      "first_topic/2": [[0, 18]]}


def test_incremental_rerun_exports_only_new_offsets(spark: Any, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    _append(logs, "t", 0, 0, 5)
    _append(logs, "t", 1, 0, 3)
    config = ExportConfig(output=str(out), source=str(logs), topics=["t"],
                          checkpoint=str(tmp_path / "ckpt"))
    first = run_export(config, spark=spark)
    assert first.rows == 8
    _append(logs, "t", 0, 5, 4)
    second = run_export(config, spark=spark)
    assert second.rows == 4
    assert [Path(f).name for f in second.files] == [f"t+0+{5:020d}.snappy.parquet"]
    third = run_export(config, spark=spark)
    assert third.rows == 0 and third.files == []
    assert _offsets(spark, out) == sorted(
        [("t", 0, o) for o in range(9)] + [("t", 1, o) for o in range(3)])


class Crash(Exception):
    pass


@pytest.mark.parametrize("point", ["written", "committed", "moved-one", "recorded"])
def test_a_run_that_dies_at_any_step_then_reruns_gives_each_row_once(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    _append(logs, "t", 0, 0, 6)
    _append(logs, "t", 1, 0, 4)
    config = ExportConfig(output=str(out), source=str(logs), topics=["t"],
                          partition_by=["partition"])
    assert run_export(config, spark=spark).rows == 10
    _append(logs, "t", 0, 6, 5)
    _append(logs, "t", 1, 4, 2)

    def die(where: str) -> None:
        if where == point:
            raise Crash(where)

    monkeypatch.setattr(export, "_fault", die)
    with pytest.raises(Crash):
        run_export(config, spark=spark)
    monkeypatch.setattr(export, "_fault", lambda where: None)
    # More data arrives before the rerun; it is exported too, once.
    _append(logs, "t", 0, 11, 1)
    run_export(config, spark=spark)
    expected = sorted([("t", 0, o) for o in range(12)] + [("t", 1, o) for o in range(6)])
    assert _offsets(spark, out) == expected
    assert not (out / export.STAGING_DIR).exists()
    assert not (out / "_klog_checkpoint" / export.PENDING_FILE).exists()


@pytest.mark.parametrize("fmt", ["json", "csv", "orc"])
def test_other_formats(spark: Any, kafka_corpus: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    result = run_export(ExportConfig(output=str(out), source=str(kafka_corpus),
                                     topics=["new_topic"], format=fmt, include_headers=True,
                                     partition_by=["date"]),
                        spark=spark)
    assert result.rows == 2
    files = list(out.rglob(f"new_topic+0+{0:020d}*"))
    assert len(files) == 1 and files[0].parent.name.startswith("date=2020-")
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    rows = reader.load(str(files[0])).collect()
    assert sorted(int(r["offset"]) for r in rows) == [0, 1]


def test_cli_json_summary_and_errors(spark: Any, kafka_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["spark-export", "--source", str(kafka_corpus),
                                 "--topic-pattern", "first_.*", "--output", str(out),
                                 "--ending-offsets", '{"first_topic":{"0":4}}',
                                 "--master", "local[2]", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["rows"] == 4 + 12 + 18
    assert {(p["partition"], p["start"], p["end"]) for p in doc["partitions"]} == {
        (0, 0, 4), (1, 0, 12), (2, 0, 18)}
    # The table, on a rerun with nothing new.
    again = runner.invoke(app, ["spark-export", "--source", str(kafka_corpus),
                                "--topic", "first_topic", "--output", str(out)])
    assert again.exit_code == 0, again.output
    assert "first_topic" in again.stdout and "[4, 11)" in again.stdout
    usage = runner.invoke(app, ["spark-export", "--output", str(out), "--topic", "t"])
    assert usage.exit_code == 2 and "exactly one of --source" in usage.output
    missing = runner.invoke(app, ["spark-export", "--source", str(tmp_path / "nowhere"),
                                  "--topic", "t", "--output", str(out)])
    assert missing.exit_code == 1
    assert missing.output.count("\n") == 1 and "is not a directory" in missing.output
    assert "Error:" not in missing.output  # our errors, without an exception class name
    unknown = runner.invoke(app, ["spark-export", "--source", str(kafka_corpus),
                                  "--topic", "nope", "--output", str(out)])
    assert unknown.exit_code == 1 and "no partition of topic(s) nope" in unknown.output


def test_a_killed_export_process_then_rerun_gives_each_row_once(
        spark: Any, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    for partition in (0, 1):
        log = PartitionLog(logs / f"t-{partition}")
        for base in range(0, 400, 10):  # 40 segments: 40 tasks per partition
            log.append_as_follower(build_batch(base, [b"r%d" % o for o in range(base, base + 10)]))
            log.roll()
        log.close()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        [sys.executable, "-m", "klog", "spark-export", "--source", str(logs), "--topic", "t",
         "--output", str(out), "--master", "local[1]", "--json"],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 240
        # Kill it (the JVM and Python workers with it) once Spark has finished some tasks.
        while time.monotonic() < deadline and proc.poll() is None:
            if any((out / export.STAGING_DIR).glob("*/_stats/*.json")):
                break
            time.sleep(0.05)
        killed_midway = proc.poll() is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert killed_midway, "the export finished before it could be killed"
    # Nothing was committed: whatever Spark wrote is still in the staging directory.
    assert not [p for p in out.rglob("*.parquet") if export.STAGING_DIR not in p.parts]
    result = run_export(ExportConfig(output=str(out), source=str(logs), topics=["t"]),
                        spark=spark)
    assert result.rows == 800
    assert _offsets(spark, out) == sorted(("t", p, o) for p in (0, 1) for o in range(400))


def test_a_corrupt_segment_fails_the_export_with_one_line_and_commits_nothing(
        spark: Any, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    _append(logs, "t", 0, 0, 50)
    segment = logs / "t-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0xFF  # inside the records: the CRC no longer matches
    segment.write_bytes(bytes(data))
    result = runner.invoke(app, ["spark-export", "--source", str(logs), "--topic", "t",
                                 "--output", str(out)])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1, result.output
    assert "Spark failed" in result.output and "CorruptRecordError" in result.output
    assert not (out / "_klog_checkpoint" / "ranges.json").exists()


def test_a_failed_job_shows_the_user_one_line_not_sparks_stack_traces(tmp_path: Path) -> None:
    # In its own process, as a user runs it: the JVM writes to the terminal directly, which
    # the in-process runner above does not capture. Spark logs a failed task's Java and
    # Python stack traces at ERROR (some 200 lines for one corrupt record).
    logs, out = tmp_path / "logs", tmp_path / "out"
    _append(logs, "t", 0, 0, 50)
    segment = logs / "t-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0xFF
    segment.write_bytes(bytes(data))
    result = subprocess.run(
        [sys.executable, "-m", "klog", "spark-export", "--source", str(logs), "--topic", "t",
         "--output", str(out), "--master", "local[1]"],
        capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: Spark failed: CorruptRecordError"), result.stderr
    assert "Traceback" not in result.stderr and "\tat " not in result.stderr, result.stderr
    # What is left is the JVM's own start-up notices, before Spark's logging is set up.
    assert len(lines) <= 4, result.stderr


def test_records_deleted_before_export_are_reported(spark: Any, tmp_path: Path) -> None:
    logs, out = tmp_path / "logs", tmp_path / "out"
    _append(logs, "t", 0, 0, 5)
    config = ExportConfig(output=str(out), source=str(logs), topics=["t"])
    assert run_export(config, spark=spark).rows == 5
    # Retention ran: the log now starts at 12.
    log = PartitionLog(logs / "t-0")
    log.truncate_fully_and_start_at(12)
    log.close()
    _append(logs, "t", 0, 12, 3)
    result = run_export(config, spark=spark)
    assert [(p.start, p.end, p.rows, p.lost) for p in result.partitions] == [(12, 15, 3, 7)]
    again = runner.invoke(app, ["spark-export", "--source", str(logs), "--topic", "t",
                                "--output", str(tmp_path / "other"), "--json"])
    assert again.exit_code == 0 and "warning" not in again.output


def test_parse_conf_as_spark_submit() -> None:
    assert export.parse_conf(["spark.driver.memory=4g", "a.b=x=y", "empty="]) == {
        "spark.driver.memory": "4g", "a.b": "x=y", "empty": ""}
    for bad in ("spark.driver.memory", "=4g", " =4g"):
        with pytest.raises(export.ExportError, match="expected KEY=VALUE"):
            export.parse_conf([bad])


def test_session_conf_user_settings_over_klogs() -> None:
    conf = export.session_conf({"spark.ui.showConsoleProgress": "true",
                                "spark.driver.extraJavaOptions": "-Dx=1",
                                "spark.driver.memory": "4g"})
    assert conf["spark.ui.showConsoleProgress"] == "true"
    assert conf["spark.driver.memory"] == "4g"
    assert conf["spark.python.daemon.module"] == "klog.spark.pydaemon"
    # klog's quiet log4j stays, the user's JVM options come after it.
    java = conf["spark.driver.extraJavaOptions"].split()
    assert java[0].startswith("-Dlog4j2.configurationFile=") and java[1:] == ["-Dx=1"]


def test_cli_malformed_conf_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["spark-export", "--source", str(tmp_path), "--topic", "t",
                                 "--output", str(tmp_path / "out"), "--conf", "a=1",
                                 "--conf", "spark.driver.memory"])
    assert result.exit_code == 2
    assert "--conf 'spark.driver.memory': expected KEY=VALUE" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_conf_reaches_the_session(spark: Any, kafka_corpus: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests' JVM is already up, so getOrCreate reuses it: only runtime (SQL) settings
    # can reach it. That is what this checks, end to end from the CLI's --conf.
    key, before = "spark.sql.shuffle.partitions", spark.conf.get("spark.sql.shuffle.partitions")
    seen: list[dict[str, str]] = []
    real = export.spark_session

    def spy(master: str, conf: dict[str, str] | None = None) -> Any:
        seen.append(dict(conf or {}))
        return real(master, conf)

    monkeypatch.setattr(export, "spark_session", spy)
    try:
        result = runner.invoke(app, ["spark-export", "--source", str(kafka_corpus),
                                     "--topic", "first_topic", "--output", str(tmp_path / "o"),
                                     "--master", "local[2]", "--conf", f"{key}=7", "--json"])
        assert result.exit_code == 0, result.output
        assert seen == [{key: "7"}]
        assert spark.conf.get(key) == "7"
        assert json.loads(result.output)["rows"] == 41
    finally:
        spark.conf.set(key, before)
