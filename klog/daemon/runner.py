"""Running a broker in a process: start, serve until a signal, shut down cleanly."""

from __future__ import annotations

import asyncio
import signal

from klog.daemon.broker import Broker
from klog.daemon.config import BrokerConfig


async def run_broker(config: BrokerConfig, install_signals: bool = True) -> None:
    broker = Broker(config)
    if install_signals:
        # Installed before start-up: a SIGTERM that arrives while the logs load still ends
        # in a clean shutdown (once start-up is through), never in an abrupt exit.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, broker.request_shutdown)
    try:
        await broker.start()
    except BaseException:
        await broker.shutdown()
        raise
    await broker.serve_forever(install_signals=False)
