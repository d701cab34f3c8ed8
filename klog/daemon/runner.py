"""Running a broker in a process: start, serve until a signal, shut down cleanly."""

from __future__ import annotations

from klog.daemon.broker import Broker
from klog.daemon.config import BrokerConfig


async def run_broker(config: BrokerConfig, install_signals: bool = True) -> None:
    broker = Broker(config)
    try:
        await broker.start()
    except BaseException:
        await broker.shutdown()
        raise
    await broker.serve_forever(install_signals=install_signals)
