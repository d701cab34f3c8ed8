"""The man pages stay true to the CLI: every command has a page naming all its options."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from klog.cli.app import app

MAN = Path(__file__).resolve().parents[2] / "man"


def _commands() -> dict[str, list[str]]:
    group = typer.main.get_command(app)
    out: dict[str, list[str]] = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        # A command group (``klog broker start``) has one page for all its subcommands.
        subcommands = getattr(command, "commands", None)
        commands = list(subcommands.values()) if subcommands else [command]
        options = [
            opt
            for cmd in commands
            for param in cmd.params
            for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("--") and opt != "--help"
        ]
        out[name] = options
    return out


def _page_text(name: str) -> str:
    # roff escapes hyphens as "\-"; compare on plain text.
    return (MAN / name).read_text().replace("\\-", "-")


def test_every_command_is_in_the_overview_page() -> None:
    overview = _page_text("klog.1")
    for name in _commands():
        assert name in overview, f"klog.1 does not mention {name}"


@pytest.mark.parametrize("command", sorted(_commands()))
def test_command_page_documents_every_option(command: str) -> None:
    page = MAN / f"klog-{command}.1"
    assert page.is_file(), f"no man page {page.name} for `klog {command}`"
    text = _page_text(page.name)
    missing = [opt for opt in _commands()[command] if opt not in text]
    assert not missing, f"{page.name} does not document {missing}"
