"""``klog broker start``'s work, without typer: the logging set-up, the configuration, the
broker's run until SIGTERM/SIGINT. klog/cli/broker.py is its typer command, and
klog/cli/entry.py calls it directly for the usual invocations (a fifth of the start-up).
Errors are one line through the console and a non-zero exit (``fail_now``, which needs
no typer app around it).
"""

from __future__ import annotations

from pathlib import Path

from klog.cli import console


def start_broker(config: Path | None, override: list[str], log_level: str) -> None:
    """Run a broker in the foreground with the command's options until it is stopped."""
    import asyncio
    import logging
    import sys

    # kio registers hypothesis strategies when hypothesis is importable (a test-only
    # dependency); in a broker that costs ~0.2 s of start-up and leaves a .hypothesis
    # directory in the working directory. Make it look absent to kio.
    # None in sys.modules is Python's documented "import fails"; typeshed wants a module.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

    from rich.logging import RichHandler

    from klog.daemon.config import BrokerConfig, ConfigError

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        console.fail_now(f"unknown log level {log_level!r}", console.EXIT_USAGE)
    if console.err.is_terminal:
        handler: logging.Handler = RichHandler(console=console.err, show_path=False,
                                               markup=False)
        handler.setFormatter(logging.Formatter("%(message)s", datefmt="[%X]"))
    else:
        # A log file, a pipe or a journal: one unwrapped line per record in Kafka's
        # log4j layout ("[time] LEVEL message (logger)"), which greps well and costs
        # ~20 us per line where rich's layout costs ~1 ms (a leader move of 1,000
        # partitions logs a line each).
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s "
                                               "(%(name)s)"))
    logging.basicConfig(level=level, handlers=[handler])
    if config is not None and not config.is_file():
        console.fail_now(f"config file {config} does not exist", console.EXIT_USAGE)
    try:
        broker_config = BrokerConfig.load(config, override)
    except (ConfigError, OSError) as exc:
        console.fail_now(str(exc), console.EXIT_USAGE)
    for key in getattr(broker_config, "unknown_keys", ()):
        console.warn(f"unknown config {key} is ignored")
    from klog.daemon.runner import run_broker

    try:
        asyncio.run(run_broker(broker_config))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a start-up failure: one line, non-zero exit
        console.fail_now(f"broker failed: {exc}")
