"""``klog broker start``: run a broker in the foreground until SIGTERM/SIGINT.

Formatting only: configuration loading and the broker itself live in klog.daemon. The
broker's log lines go to stderr through the one console (rich's logging handler).
"""

from __future__ import annotations

from pathlib import Path

import typer

from klog.cli import console

broker_app = console.command_group("broker", "Run a Kafka-compatible broker.")


@broker_app.command("start")
def start(
    config: Path | None = typer.Option(
        None, "--config", "-c", help="A server.properties file (Kafka's config names).",
        dir_okay=False,
    ),
    override: list[str] = typer.Option(
        [], "--override", "-o", help="key=value, overriding the file; may be repeated.",
    ),
    log_level: str = typer.Option(
        "INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR.",
    ),
) -> None:
    """Start a broker. With no options: standalone on 127.0.0.1:9092, data in ./klog-data."""
    from klog.cli.broker_start import start_broker

    start_broker(config, override, log_level)


def register(app: typer.Typer) -> None:
    app.add_typer(broker_app)
