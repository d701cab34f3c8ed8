"""Tests for klog/cli/dump.py: ``klog dump-segment`` output, streams and exit codes."""

from __future__ import annotations

import json
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
    from klog.storage import dump as lib_dump

    assert cli_dump.DEFAULT_MAX_MESSAGE_SIZE == lib_dump.DEFAULT_MAX_MESSAGE_SIZE
    assert cli_dump.DEFAULT_MAX_BYTES == lib_dump.DEFAULT_MAX_BYTES
