"""Tests for klog/cli/dump.py: ``klog dump-segment`` output, streams and exit codes."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from klog.cli.app import app
from klog.protocol.records.v2 import build_batch

runner = CliRunner()
SEGMENT = "00000000000000000000"
REPO = Path(__file__).resolve().parents[2]


def write_log(directory: Path, *batches: bytes) -> Path:
    path = directory / f"{SEGMENT}.log"
    path.write_bytes(b"".join(batches))
    return path


def test_kafka_lines_on_stdout(kafka_corpus: Path) -> None:
    log = kafka_corpus / "first_topic-1" / f"{SEGMENT}.log"
    result = runner.invoke(app, ["dump-segment", "--deep-iteration", str(log)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dumping {log}"
    assert lines[1] == "Log starting offset: 0"
    assert sum(line.startswith("| offset: ") for line in lines) == 12
    assert result.stderr == ""


def test_files_option_is_repeatable_and_comma_separated(kafka_corpus: Path) -> None:
    logs = [kafka_corpus / f"first_topic-{p}" / f"{SEGMENT}.log" for p in range(3)]
    result = runner.invoke(
        app,
        ["dump-segment", "--files", f"{logs[0]},{logs[1]}", "--files", str(logs[2]), "--json"],
    )
    assert result.exit_code == 0, result.output
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["path"] for d in docs if d["type"] == "file"] == [str(p) for p in logs]
    assert sum(d["type"] == "batch" for d in docs) > 3


def test_offsets_decoder_json_payload(kafka_corpus: Path) -> None:
    log = kafka_corpus / "__consumer_offsets-32" / f"{SEGMENT}.log"
    result = runner.invoke(app, ["dump-segment", "--offsets-decoder", "--json", str(log)])
    assert result.exit_code == 0, result.output
    records = [d for d in map(json.loads, result.stdout.splitlines()) if d["type"] == "record"]
    assert len(records) == 50
    for record in records:
        assert record["key"]["type"] in ("0", "1", "2")
        assert "group" in record["key"]["data"]


def test_payloads_are_never_markup(tmp_path: Path) -> None:
    log = write_log(tmp_path, build_batch([(1, b"[red]k[/red]", b"[bold]x[/bold] :smile:")]))
    result = runner.invoke(app, ["dump-segment", "--print-data-log", str(log)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].endswith(
        "key: [red]k[/red] payload: [bold]x[/bold] :smile:"
    )


def test_missing_file_is_one_line_and_nonzero(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dump-segment", str(tmp_path / "missing.log")])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'missing.log'}: no such file"
    ]
    assert "Traceback" not in result.output


def test_directory_and_unknown_suffix(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dump-segment", str(tmp_path)])
    assert result.exit_code == 1
    assert "is a directory" in result.stderr
    other = tmp_path / "x.json"
    other.write_text("{}")
    result = runner.invoke(app, ["dump-segment", str(other)])
    assert result.exit_code == 1  # nothing could be dumped
    assert result.stdout == f"Dumping {other}\n"
    assert result.stderr == f"Ignoring unknown file {other}\n"


def test_unknown_file_beside_a_good_one_still_succeeds(tmp_path: Path) -> None:
    log = write_log(tmp_path, build_batch([(1, None, b"v")]))
    other = tmp_path / "leader-epoch-checkpoint"
    other.write_text("0\n1\n0 0\n")
    result = runner.invoke(app, ["dump-segment", str(other), str(log)])
    assert result.exit_code == 0
    assert f"Ignoring unknown file {other}" in result.stderr


def test_garbage_tail_and_file_untouched(tmp_path: Path) -> None:
    log = write_log(tmp_path, build_batch([(1, None, b"v")]), b"\x00" * 100)
    before = log.read_bytes()
    result = runner.invoke(app, ["dump-segment", "--deep-iteration", str(log)])
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == f"Found 100 invalid bytes at the end of {log.name}"
    assert "record size 0 is less than the minimum record overhead" in result.stderr
    assert log.read_bytes() == before


def test_usage_errors(tmp_path: Path) -> None:
    log = write_log(tmp_path, build_batch([(1, None, b"v")]))
    result = runner.invoke(app, ["dump-segment", "--key-decoder-class", "com.x.Y", str(log)])
    assert result.exit_code == 2
    assert "unknown decoder" in result.stderr
    result = runner.invoke(app, ["dump-segment", "--max-message-size", "0", str(log)])
    assert result.exit_code == 2
    result = runner.invoke(
        app, ["dump-segment", "--offsets-decoder", "--transaction-log-decoder", str(log)]
    )
    assert result.exit_code == 2


def test_value_decoder_option(tmp_path: Path) -> None:
    log = write_log(tmp_path, build_batch([(1, b"\x00\x00\x00\x07", b"\xff\x00")]))
    result = runner.invoke(
        app,
        ["dump-segment", "--key-decoder-class", "int", "--value-decoder-class", "hex", str(log)],
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1].endswith("key: 7 payload: ff00")


def test_console_script_entry_point_and_broken_pipe(kafka_corpus: Path) -> None:
    log = kafka_corpus / "__consumer_offsets-18" / f"{SEGMENT}.log"
    proc = subprocess.run(
        [sys.executable, "-m", "klog.cli.app", "dump-segment", "--offsets-decoder", str(log)],
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count(b"\n| offset: ") == 499
    # A reader that stops early (| head) is not an error and shows no traceback.
    shell = f"{sys.executable} -m klog.cli.app dump-segment --offsets-decoder {log} | head -1"
    proc = subprocess.run(shell, shell=True, capture_output=True, cwd=REPO, timeout=60)
    assert proc.stdout == f"Dumping {log}\n".encode()
    assert b"Traceback" not in proc.stderr and b"Error" not in proc.stderr


def test_cli_defaults_match_the_library() -> None:
    # klog.cli.dump spells Kafka's defaults out so the CLI starts without the dump library.
    from klog.cli import dump as cli_dump
    from klog.tools import dump as lib_dump

    assert cli_dump.DEFAULT_MAX_MESSAGE_SIZE == lib_dump.DEFAULT_MAX_MESSAGE_SIZE
    assert cli_dump.DEFAULT_MAX_BYTES == lib_dump.DEFAULT_MAX_BYTES


# -- segment names and corrupt indexes (issue 18, item 7) ------------------------------------


def test_an_application_log_is_refused_unless_forced(tmp_path: Path) -> None:
    app_log = tmp_path / "app.log"
    app_log.write_text("2026-11-27 10:00:00 INFO started\n")
    result = runner.invoke(app, ["dump-segment", str(app_log)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: {app_log}: not a Kafka segment file (expected <20-digit base offset>.log); "
        "--force dumps it anyway"
    ]
    forced = runner.invoke(app, ["dump-segment", "--force", str(app_log)])
    assert forced.stdout.startswith(f"Dumping {app_log}\n")
    assert "Found 33 invalid bytes at the end of app.log" in forced.stdout


def _segment_with_index(tmp_path: Path) -> tuple[Path, Path, bytes]:
    from klog.storage.scan import rebuild_indexes
    from tests.storage.inspect_batches import write_segment

    log, _layout = write_segment(tmp_path / "orders-0", 0, [2] * 40)
    rebuild_indexes(log, 0, index_interval_bytes=200)
    index = log.with_suffix(".index")
    return log, index, index.read_bytes()


def _one_error_line(result: object) -> str:
    assert result.exit_code == 1, result.output  # type: ignore[attr-defined]
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    errors = [
        line for line in result.stderr.splitlines()  # type: ignore[attr-defined]
        if line.startswith("error: ")
    ]
    assert len(errors) == 1, result.stderr  # type: ignore[attr-defined]
    assert "Invalid argument" not in result.stderr  # type: ignore[attr-defined]
    return errors[0]


def test_garbage_padded_index_names_the_bad_entry(tmp_path: Path) -> None:
    _log, index, good = _segment_with_index(tmp_path)
    n = len(good) // 8
    # A valid index followed by garbage: relative offset 2^31-1, position -1.
    index.write_bytes(good + b"\x7f\xff\xff\xff\xff\xff\xff\xff" + b"\x13" * 16)
    result = runner.invoke(app, ["dump-segment", str(index)])
    line = _one_error_line(result)
    assert line == (
        f"error: {index}: entry {n} (byte {n * 8}: offset 2147483647, position -1) is "
        f"corrupt: position -1 is negative; entries {n} to {n + 2} are not dumped"
    )
    # The sound entries are still dumped, in Kafka's format.
    assert result.stdout.splitlines()[1:] == [
        f"offset: {o} position: {p}" for o, p in struct.iter_unpack(">ii", good)
    ]
    sanity = runner.invoke(app, ["dump-segment", "--index-sanity-check", str(index)])
    assert "failed sanity check: entry" in _one_error_line(sanity)
    # A size that is not a whole number of entries.
    index.write_bytes(good + b"\x01\x02\x03")
    line = _one_error_line(runner.invoke(app, ["dump-segment", str(index)]))
    assert line == (
        f"error: {index}: {len(good) + 3} bytes is not a whole number of 8-byte entries: "
        f"the last 3 bytes (from byte {len(good)}) are not an entry"
    )


def test_garbage_padded_time_and_txn_index_name_the_bad_entry(tmp_path: Path) -> None:
    log, _index, _good = _segment_with_index(tmp_path)
    timeindex = log.with_suffix(".timeindex")
    good = timeindex.read_bytes()
    n = len(good) // 12
    timeindex.write_bytes(good + struct.pack(">qi", 5, -7))
    line = _one_error_line(runner.invoke(app, ["dump-segment", str(timeindex)]))
    assert f"entry {n} (byte {n * 12}: timestamp 5, offset -7) is corrupt: offset -7 is " in line
    timeindex.write_bytes(good + b"\x00" * 5)
    line = _one_error_line(runner.invoke(app, ["dump-segment", str(timeindex)]))
    assert "is not a whole number of 12-byte entries" in line

    txnindex = log.with_suffix(".txnindex")
    txnindex.write_bytes(b"\x00\x07" + b"\xff" * 32 + b"\x00" * 10)
    result = runner.invoke(app, ["dump-segment", "--json", str(txnindex)])
    line = _one_error_line(result)
    assert "entry 0 (byte 0: " in line and "version 7 is not 0" in line
    doc = json.loads(result.stdout.splitlines()[-1])
    assert doc["type"] == "corrupt_index" and doc["entry"] == 0 and doc["byte"] == 0


def test_verify_names_the_bad_entry_of_a_garbage_padded_index(tmp_path: Path) -> None:
    log, index, good = _segment_with_index(tmp_path)
    n = len(good) // 8
    index.write_bytes(good + b"\x7f\xff\xff\xff\xff\xff\xff\xff")
    result = runner.invoke(app, ["verify", str(log.parent)])
    assert result.exit_code == 1
    assert f"offset index entry {n} (offset 2147483647, position -1) does not follow" in (
        result.stdout
    )


def test_time_index_beside_a_damaged_offset_index(tmp_path: Path) -> None:
    # The .timeindex is looked up through the .index beside it; a damaged .index (here
    # not a whole number of entries) must not crash that (it ended in a BufferError).
    log, index, good = _segment_with_index(tmp_path)
    timeindex = log.with_suffix(".timeindex")
    index.write_bytes(good + b"\x01\x02\x03\x04\x05")
    result = runner.invoke(app, ["dump-segment", str(timeindex)])
    assert result.exit_code == 0, result.output
    assert "Error" not in result.stderr and "Traceback" not in result.output
    assert f"{index.name} beside it is damaged" in result.stderr
    entries = struct.iter_unpack(">qi", timeindex.read_bytes())
    assert result.stdout.splitlines()[1:] == [
        f"timestamp: {ts} offset: {rel}" for ts, rel in entries
    ]
