"""The ``klog`` command's entry point (and ``python -m klog``'s).

``klog broker start`` with its usual options (``--config``/``-c``, ``--override``/``-o``,
``--log-level``) goes straight to klog/cli/broker_start.py: importing typer and every
command module, and typer's parsing, were a fifth of a broker's start to its first
acknowledged produce. Anything else -- another command, ``--help``, an option this parser
does not know, a mistake -- goes to the typer app (klog/cli/app.py), which parses and
reports as for every command.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The options of ``klog broker start`` (klog/cli/broker.py), by every name typer knows.
_OPTIONS = {"--config": "config", "-c": "config", "--override": "override",
            "-o": "override", "--log-level": "log_level"}


def parse_broker_start(args: list[str]) -> tuple[Path | None, list[str], str] | None:
    """``klog broker start``'s options as its typer command would receive them, or None
    for anything the typer app must see (it then parses and reports as usual)."""
    config: Path | None = None
    override: list[str] = []
    log_level = "INFO"
    i = 0
    while i < len(args):
        arg = args[i]
        name, equals, value = arg.partition("=")
        if not arg.startswith("--"):
            name, equals, value = arg, "", ""
        option = _OPTIONS.get(name)
        if option is None:
            return None
        if not equals:
            if i + 1 >= len(args):
                return None  # typer's "requires an argument"
            value = args[i + 1]
            i += 1
        i += 1
        if option == "config":
            if Path(value).is_dir():
                return None  # typer's dir_okay=False error
            config = Path(value)
        elif option == "override":
            override.append(value)
        else:
            log_level = value
    return config, override, log_level


def main() -> None:
    """Run ``klog`` with the process's arguments."""
    args = sys.argv[1:]
    if args[:2] == ["broker", "start"]:
        options = parse_broker_start(args[2:])
        if options is not None:
            from klog.cli.broker_start import start_broker

            start_broker(*options)
            sys.exit(0)
    from klog.cli.app import main as app_main

    app_main()
