"""The ``klog`` typer application: the whole command surface in one list.

Each command group lives in its own module and registers itself through ``register``;
commands are thin and call library code in ``klog.storage`` / ``klog.daemon``.
"""

from __future__ import annotations

import sys

import typer

from klog import __version__
from klog.cli import console

app = typer.Typer(
    name="klog",
    help="A Kafka-compatible broker and toolkit for Kafka's on-disk format.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        console.line(f"klog {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """A Kafka-compatible broker and toolkit for Kafka's on-disk format."""


def _register_commands() -> None:
    # The command surface, one line per group.
    from klog.cli import dump, inspect

    dump.register(app)
    inspect.register(app)


def main() -> None:
    """Console-script entry point: no tracebacks reach the user."""
    _register_commands()
    try:
        app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        console.err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors and anything unforeseen
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(console.EXIT_USAGE if isinstance(exc, click.UsageError) else 1)
        console.err.print(f"[bold red]error:[/bold red] {type(exc).__name__}: {exc}",
                          markup=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
