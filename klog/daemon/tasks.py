"""Stopping the broker's background tasks without hanging its shutdown.

Python 3.11's ``asyncio.wait_for`` can swallow a cancellation that arrives while the
awaited operation completes (fixed in 3.12), so a loop task cancelled once may simply go
round again; ``await task`` after one ``cancel()`` then waits forever and a SIGTERM'd
broker never exits. ``stop_task`` cancels again until the task ends, and gives up (with a
warning) after a bounded time instead of blocking the shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


async def stop_task(task: asyncio.Task[Any] | None, timeout: float = 5.0,
                    what: str = "task") -> bool:
    """Cancel ``task`` (again every 0.5 s while it runs) until it ends or ``timeout``
    passes; True if it ended. Its result or exception is consumed."""
    if task is None:
        return True
    if task is asyncio.current_task():  # stopping ourselves: the caller unwinds instead
        return False
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not task.done():
        task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            log.warning("%s did not stop within %.1f s; leaving it", what, timeout)
            return False
        await asyncio.wait([task], timeout=min(0.5, left))
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at exit
    return True
