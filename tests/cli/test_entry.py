"""klog/cli/entry.py: `klog broker start` parsed without typer exactly as typer parses it,
and everything else left to the typer app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klog.cli import broker_start, entry
from klog.cli.app import app


def _typer_options(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> Any:
    """What the typer command hands start_broker for ``klog broker start ARGS``."""
    seen: list[Any] = []
    monkeypatch.setattr(broker_start, "start_broker", lambda *options: seen.append(options))
    result = CliRunner().invoke(app, ["broker", "start", *args])
    assert result.exit_code == 0, result.output
    return seen[0]


@pytest.mark.parametrize("args", [
    [],
    ["-o", "broker.id=3"],
    ["--override", "a=1", "-o", "b=x=y", "--override=c=2"],
    ["--log-level", "debug", "-o", "listeners=PLAINTEXT://127.0.0.1:9"],
    ["--log-level=WARNING"],
    ["-c", "server.properties", "-o", "log.dirs=/tmp/x"],
    ["--config=server.properties"],
    ["--config", "a.properties", "--config", "b.properties"],  # the last one wins
])
def test_the_usual_options_parse_as_typer_parses_them(monkeypatch, tmp_path, args) -> None:
    monkeypatch.chdir(tmp_path)
    assert entry.parse_broker_start(args) == _typer_options(monkeypatch, args)


@pytest.mark.parametrize("args", [
    ["--help"], ["-h"], ["--bogus"], ["-o"], ["--config"], ["-obroker.id=1"], ["--", "x"],
    ["extra"], ["--log-level"],
])
def test_anything_else_goes_to_typer(args) -> None:
    assert entry.parse_broker_start(args) is None


def test_a_directory_as_config_gets_typers_error(tmp_path) -> None:
    assert entry.parse_broker_start(["--config", str(tmp_path)]) is None
    result = subprocess.run([sys.executable, "-m", "klog", "broker", "start", "--config",
                             str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "directory" in result.stderr and "Traceback" not in result.stderr


def test_the_broker_starts_without_importing_typer(tmp_path: Path) -> None:
    """The point of the fast path: a bad override fails inside start_broker (after the
    config is read), and typer was never imported on the way."""
    code = ("import sys\n"
            "sys.argv = ['klog', 'broker', 'start', '-o', 'listeners=nonsense',"
            f" '-o', 'log.dirs={tmp_path}']\n"
            "from klog.cli import entry\n"
            "try:\n"
            "    entry.main()\n"
            "except SystemExit as exc:\n"
            "    print(exc.code, 'typer' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.split() == ["2", "False"], (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "listeners" in errors[0]
