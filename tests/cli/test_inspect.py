"""Tests for klog/cli/inspect.py: ``klog verify`` / ``klog recover`` output and exit codes."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.protocol.records.batch import crc32c
from klog.storage import checkpoints as cp
from tests.storage.inspect_batches import segment_name, write_segment

runner = CliRunner()


@pytest.fixture
def corpus_copy(kafka_corpus: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "kafka-logs"
    shutil.copytree(kafka_corpus, dest)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    return dest


@pytest.fixture
def torn_partition(tmp_path: Path) -> tuple[Path, int]:
    log, layout = write_segment(tmp_path / "orders-1", 0, [2] * 10)
    with open(log, "r+b") as fh:
        fh.truncate(layout[-1][0] + 15)
    return log.parent, layout[-1][0]


def test_verify_real_kafka_corpus_is_intact(kafka_corpus: Path) -> None:
    result = runner.invoke(app, ["verify", str(kafka_corpus)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    row = next(line for line in lines if line.startswith("first_topic-2 "))
    cells = [c for c in row.split() if c != "│"]
    # partition, segments, batches, records, log start, log end, status
    assert cells == ["first_topic-2", "1", "16", "18", "0", "18", "rebuildable"]
    assert "rebuildable first_topic-0 00000000000000000000.index: offset index is missing" in (
        result.stdout
    )
    assert lines[-1].startswith("intact: 54 partitions, 54 segments, 1068 records; 0 damage")


def test_verify_json_shape(kafka_corpus: Path) -> None:
    result = runner.invoke(app, ["verify", "--json", str(kafka_corpus / "new_topic-0")])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["kind"] == "partition" and doc["status"] == "rebuildable"
    [part] = doc["partitions"]
    assert {k: part[k] for k in ("name", "segments", "records", "log_end_offset")} == {
        "name": "new_topic-0", "segments": 1, "records": 2, "log_end_offset": 2
    }
    assert {f["severity"] for f in doc["findings"]} == {"rebuildable"}
    assert set(doc["findings"][0]) == {
        "severity", "message", "partition", "file", "offset", "position"
    }


def test_verify_damage_exits_1_and_names_the_place(torn_partition: tuple[Path, int]) -> None:
    pdir, position = torn_partition
    result = runner.invoke(app, ["verify", str(pdir)])
    assert result.exit_code == 1
    assert f"damage      orders-1 {segment_name(0)} offset 18 position {position}:" in (
        result.stdout
    )
    assert "DAMAGED: 1 partitions" in result.stdout
    doc = json.loads(runner.invoke(app, ["verify", "--json", str(pdir)]).stdout)
    assert doc["status"] == "damaged"
    assert doc["findings"][0]["position"] == position


def test_verify_names_a_batch_whose_records_do_not_decode(tmp_path: Path) -> None:
    log, layout = write_segment(tmp_path / "orders-1", 0, [2] * 4)
    data = bytearray(log.read_bytes())
    position = layout[2][0]
    struct.pack_into(">h", data, position + 21, 7)  # codec id 7, CRC made right again
    struct.pack_into(">I", data, position + 17, crc32c(bytes(data[position + 21:layout[3][0]])))
    log.write_bytes(bytes(data))
    result = runner.invoke(app, ["verify", str(log.parent)])
    assert result.exit_code == 1
    assert f"damage      orders-1 {segment_name(0)} offset 4 position {position}:" in (
        result.stdout
    )
    assert "do not decode" in result.stdout and "unknown compression codec 7" in result.stdout


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verify", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "no such file or directory" in result.stderr
    assert "Traceback" not in result.output
    (tmp_path / "empty").mkdir()
    assert runner.invoke(app, ["recover", str(tmp_path / "empty")]).exit_code == 2
    assert runner.invoke(app, ["verify"]).exit_code == 2


def test_recover_dry_run_then_real_then_noop(torn_partition: tuple[Path, int]) -> None:
    pdir, position = torn_partition
    before = {p.name: p.read_bytes() for p in pdir.iterdir()}
    dry = runner.invoke(app, ["recover", "--dry-run", str(pdir)])
    assert dry.exit_code == 0
    assert dry.stdout.startswith("dry run: nothing was changed")
    assert f"[dry run] orders-1: truncated 15 bytes at position {position}" in dry.stdout
    assert {p.name: p.read_bytes() for p in pdir.iterdir()} == before

    real = runner.invoke(app, ["recover", "--json", str(pdir)])
    assert real.exit_code == 0
    doc = json.loads(real.stdout)
    assert doc["dry_run"] is False
    truncate = next(a for a in doc["actions"] if a["kind"] == "truncate")
    assert truncate["position"] == position and truncate["bytes"] == 15
    assert Path(truncate["saved_as"]).name == f"{segment_name(0)}.truncated-at-{position}.bin"
    assert doc["partitions"] == [
        {"name": "orders-1", "recovered_from": 0, "log_end_offset": 18}
    ]

    again = runner.invoke(app, ["recover", str(pdir)])
    assert again.exit_code == 0
    assert again.stdout.strip() == "nothing to do: 1 partitions are consistent"
    assert runner.invoke(app, ["verify", str(pdir)]).exit_code == 0


def test_recover_real_corpus(corpus_copy: Path) -> None:
    result = runner.invoke(app, ["recover", str(corpus_copy)])
    assert result.exit_code == 0
    assert "first_topic-1: rebuilt 00000000000000000000.index and" in result.stdout
    assert result.stdout.splitlines()[-1] == "took 54 actions on 54 partitions"


def test_recover_refuses_a_locked_log_dir(corpus_copy: Path) -> None:
    fd = os.open(corpus_copy / cp.LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = runner.invoke(app, ["recover", str(corpus_copy)])
    finally:
        os.close(fd)
    assert result.exit_code == 1
    assert "broker is running" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_real_binary_exit_codes(tmp_path: Path, torn_partition: tuple[Path, int]) -> None:
    # Through the console-script entry point (not CliRunner): exit codes must survive.
    pdir, _ = torn_partition
    cmd = [sys.executable, "-c", "from klog.cli.app import main; main()"]
    damaged = subprocess.run([*cmd, "verify", str(pdir)], capture_output=True, text=True)
    assert damaged.returncode == 1
    usage = subprocess.run([*cmd, "verify", str(tmp_path / "x")], capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("error: ")


# -- only Kafka's layout is acted on (issue 18, item 7) --------------------------------------

APP_LOG = b"2026-11-27 10:00:00 INFO started\n2026-11-27 10:00:01 WARN disk 91% full\n"


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes: any change, any new file, shows."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_refused(result: object, *, code: int = 2) -> str:
    stderr = result.stderr  # type: ignore[attr-defined]
    assert result.exit_code == code, result.output  # type: ignore[attr-defined]
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    [line] = stderr.strip().splitlines()
    assert line.startswith("error: ")
    return line


@pytest.mark.parametrize("command", ["recover", "verify"])
def test_an_application_log_is_refused_and_untouched(tmp_path: Path, command: str) -> None:
    app_log = tmp_path / "app.log"
    app_log.write_bytes(APP_LOG)
    before = tree(tmp_path)
    for args in ([command, str(app_log)], [command, "--dry-run", str(app_log)]):
        if command == "verify" and "--dry-run" in args:
            continue
        line = assert_refused(runner.invoke(app, args))
        assert "app.log: not a Kafka segment file" in line and "--force" in line
    # Same bytes, no 00000000000000000000.index / .timeindex, nothing saved aside.
    assert tree(tmp_path) == before


def test_recover_force_treats_an_application_log_as_a_segment(tmp_path: Path) -> None:
    app_log = tmp_path / "app.log"
    app_log.write_bytes(APP_LOG)
    result = runner.invoke(app, ["recover", "--force", str(app_log)])
    assert result.exit_code == 0, result.output
    # As before the fix: the bytes that are not batches are cut, but saved beside it...
    assert app_log.read_bytes() == b""
    saved = tmp_path / "app.log.truncated-at-0.bin"
    assert saved.read_bytes() == APP_LOG
    # ...and the index files it reports are the ones it wrote.
    assert "rebuilt 00000000000000000000.index and 00000000000000000000.timeindex" in (
        result.stdout
    )
    assert (tmp_path / "00000000000000000000.index").is_file()
    assert (tmp_path / "00000000000000000000.timeindex").is_file()


def test_dirs_not_laid_out_as_kafka_are_refused(tmp_path: Path) -> None:
    # A dir holding a real segment but not named <topic>-<partition>.
    plain = tmp_path / "backup"
    log, layout = write_segment(plain, 0, [2] * 4)
    with open(log, "r+b") as fh:
        fh.truncate(layout[-1][0] + 5)  # torn: recover would cut it
    # A dir whose only "<name>-<digits>" subdir holds no segments, and a segment file
    # outside a partition dir.
    (tmp_path / "tools" / "python-3").mkdir(parents=True)
    (tmp_path / "tools" / "python-3" / "app.log").write_bytes(APP_LOG)
    before = tree(tmp_path)
    for command in ("recover", "verify"):
        line = assert_refused(runner.invoke(app, [command, str(plain)]))
        assert "is not a partition dir (<topic>-<partition>)" in line
        line = assert_refused(runner.invoke(app, [command, str(log)]))
        assert "not in a partition dir" in line
        line = assert_refused(runner.invoke(app, [command, str(tmp_path / "tools")]))
        assert "not a log dir, partition dir or segment file" in line
    assert tree(tmp_path) == before
    # Forced, the dir is recovered as the partition it was taken for.
    result = runner.invoke(app, ["recover", "--force", str(plain)])
    assert result.exit_code == 0, result.output
    assert "backup: truncated 5 bytes" in result.stdout


def test_recover_keeps_a_damaged_index_aside(tmp_path: Path) -> None:
    pdir = tmp_path / "orders-0"
    log, _layout = write_segment(pdir, 0, [2] * 40)
    from klog.storage.scan import rebuild_indexes

    rebuild_indexes(log, 0, index_interval_bytes=200)
    index = pdir / segment_name(0, ".index")
    padded = index.read_bytes() + b"\x7f\xff\xff\xff\xff\xff\xff\xff" + b"\x01" * 13
    index.write_bytes(padded)
    verify = runner.invoke(app, ["verify", str(pdir)])
    assert verify.exit_code == 1
    assert "offset index size" in verify.stdout and "is not a multiple of 8" in verify.stdout
    result = runner.invoke(app, ["recover", str(pdir)])
    assert result.exit_code == 0, result.output
    saved = pdir / f"{index.name}.before-recover"
    assert f"moved damaged {index.name} aside to {saved.name}" in result.stdout
    assert saved.read_bytes() == padded
    assert runner.invoke(app, ["verify", str(pdir)]).exit_code == 0


def test_verify_a_running_brokers_log_dir(klog_broker: object) -> None:
    # A running broker holds its log dir and preallocates its active segments' indexes
    # (segment.index.bytes of zero entries): Kafka's sanity check passes such an index,
    # and so must verify. It exited 1, calling the zero entries damage.
    from confluent_kafka import Producer

    from klog.testing import KlogBroker

    assert isinstance(klog_broker, KlogBroker)
    producer = Producer({"bootstrap.servers": klog_broker.bootstrap_servers})
    for n in range(20):
        producer.produce("running", key=b"k%d" % n, value=b"v" * 50)
    assert producer.flush(30) == 0
    partition = klog_broker.log_dir / "running-0"
    index = partition / segment_name(0, ".index")
    # The active segment's indexes as a running broker has them: preallocated.
    assert index.stat().st_size == 10 * 1024 * 1024
    result = runner.invoke(app, ["verify", "--json", str(klog_broker.log_dir)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "ok", doc["findings"]
    # What it says: a broker holds the dir, nothing else.
    assert [f["severity"] for f in doc["findings"]] == ["warning"]
    assert "broker is running" in doc["findings"][0]["message"]
    [row] = [p for p in doc["partitions"] if p["name"] == "running-0"]
    assert (row["records"], row["log_end_offset"], row["status"]) == (20, 20, "ok")
