"""Every command of the tree answers --help: walked from the typer app, so a command added
later is covered without a line here (a Rich markup error in a help text, e.g. an option
that writes ``[/chroot]``, crashed ``klog cluster up --help``)."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from klog.cli.app import app

runner = CliRunner()


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    # A group has subcommands (typer vendors click: its classes are not importable as click).
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        out += _commands(sub, (*path, name))
    return out


COMMANDS = _commands(typer.main.get_command(app))


def test_the_walk_sees_the_whole_tree() -> None:
    assert len(COMMANDS) > 30
    assert ("cluster", "up") in COMMANDS and ("broker", "start") in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "klog")
def test_help(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "Usage" in result.output
    assert result.exception is None


def _leaf(path: tuple[str, ...]) -> Any:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", [p for p in COMMANDS if p and p[-1] in (
    "list", "describe", "status", "verify", "api-versions")], ids=" ".join)
def test_every_listing_has_json(path: tuple[str, ...]) -> None:
    options = {opt for param in _leaf(path).params for opt in param.opts}
    assert "--json" in options
