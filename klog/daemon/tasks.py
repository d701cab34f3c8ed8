"""Stopping the broker's background tasks without hanging its shutdown; answering a
request that was queued to a task (``answer``).

Python 3.11's ``asyncio.wait_for`` can swallow a cancellation that arrives while the
awaited operation completes (fixed in 3.12), so a loop task cancelled once may simply go
round again; ``await task`` after one ``cancel()`` then waits forever and a SIGTERM'd
broker never exits. ``stop_task`` cancels again until the task ends, and gives up (with a
warning) after a bounded time instead of blocking the shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
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


async def answer(future: asyncio.Future[Any], work: Callable[[], Awaitable[Any]]) -> None:
    """Run the work a request queued to a task asked for and settle the asker's ``future``
    with its result, or its exception (raised again, for the task's own handling)."""
    try:
        result = await work()
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
        raise
    if not future.done():
        future.set_result(result)


async def returning(value: Any) -> Any:
    """An awaitable of ``value``: ``answer``'s work when there is nothing to do."""
    return value
