"""The one place klog's commands print through.

Normal output goes to stdout, diagnostics and errors to stderr. Markup is off for
anything that came from user data (topic names, payloads), so a payload containing
``[red]`` prints as it is. Progress bars degrade to nothing when stderr is not a TTY.
Also the conventions every command shares: the exit codes, ``-h``, how a group is made.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from rich.console import Console

if TYPE_CHECKING:
    import typer

# typer and rich's progress bars are imported where they are used: `klog broker start`
# runs without them (klog/cli/entry.py), and they are a fifth of its start-up.

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_OK = 0
EXIT_DAMAGE = 1
EXIT_USAGE = 2

#: ``-h`` as well as ``--help``, on the root and on every command group.
HELP_OPTIONS: dict[str, list[str]] = {"help_option_names": ["-h", "--help"]}


def command_group(name: str, help: str) -> typer.Typer:
    """A command group (``klog NAME ...``) as every group module makes it: its help, the
    group's help on a bare ``klog NAME``, ``-h``."""
    import typer

    return typer.Typer(name=name, help=help, no_args_is_help=True,
                       context_settings=HELP_OPTIONS)


def line(text: str) -> None:
    """Print one plain line of data to stdout, no markup, no wrapping."""
    sys.stdout.write(text + "\n")


def raw(text: str) -> None:
    """Write text to stdout as it is: for tools whose lines scripts parse."""
    sys.stdout.write(text)


def emit_json(obj: Any) -> None:
    """One JSON document on one line (JSON Lines), for scripts."""
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")


def info(text: str) -> None:
    err.print(text, markup=False)


def warn(text: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {_escape(text)}")


def fail(text: str, code: int = EXIT_DAMAGE) -> NoReturn:
    """Print one clear error line to stderr and exit non-zero."""
    import typer

    err.print(f"[bold red]error:[/bold red] {_escape(text)}")
    raise typer.Exit(code)


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` from inside a command that runs long or returns a status:
    sys.exit, not typer.Exit, because app.main() runs click with standalone_mode=False,
    which turns typer.Exit into a return value that main() drops (exit status 0).
    SystemExit passes through click untouched, in the real binary and in CliRunner alike."""
    sys.exit(code)


def fail_now(text: str, code: int = EXIT_DAMAGE) -> NoReturn:
    """``fail``, exiting through ``exit_now`` (also where no typer app runs)."""
    err.print(f"[bold red]error:[/bold red] {_escape(text)}")
    exit_now(code)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@contextmanager
def progress(description: str, total: int | None, *, bytes_: bool = True) -> Iterator[Any]:
    """A progress bar on stderr; yields a callable ``advance(n)``.

    Shown only when stderr is a terminal, so pipes and CI logs stay clean.
    """
    if not err.is_terminal:
        yield lambda n=1: None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns: list[Any] = [TextColumn("{task.description}"), BarColumn()]
    if bytes_:
        columns += [DownloadColumn(), TransferSpeedColumn()]
    columns.append(TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
