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
    context_settings=console.HELP_OPTIONS,
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
    from klog.cli import broker, dump, inspect

    broker.register(app)
    dump.register(app)
    inspect.register(app)
    from klog.cli import consume

    consume.register(app)
    from klog.cli import configs, groups, offsets, topic

    topic.register(app)
    offsets.register(app)
    configs.register(app)
    groups.register(app)
    from klog.cli import perf, produce

    produce.register(app)
    perf.register(app)
    from klog.cli import cluster

    cluster.register(app)
    from klog.cli import reassign

    reassign.register(app)
    from klog.cli import spark_export

    spark_export.register(app)
    from klog.cli import elect_leaders

    elect_leaders.register(app)
    from klog.cli import api_versions, delete_records, log_dirs

    log_dirs.register(app)
    delete_records.register(app)
    api_versions.register(app)
    from klog.cli import compact

    compact.register(app)
    from klog.cli import transactions

    transactions.register(app)
    from klog.cli import acls

    acls.register(app)


_register_commands()


def main() -> None:
    """Console-script entry point: no tracebacks reach the user."""
    try:
        # Without standalone mode, typer returns the code of a typer.Exit instead of
        # raising it; it must still become the process's exit status.
        rv = app(standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else 0)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        console.err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # usage errors and anything unforeseen
        # Typer's parsing errors derive from TyperException and know how to show
        # themselves and which exit code they mean (2 for usage errors).
        if isinstance(exc, typer.TyperException) and hasattr(exc, "show"):
            exc.show()
            sys.exit(getattr(exc, "exit_code", console.EXIT_USAGE))
        console.err.print("[bold red]error:[/bold red] ", end="")
        console.err.print(f"{type(exc).__name__}: {exc}", markup=False)
        sys.exit(1)


if __name__ == "__main__":
    main()
