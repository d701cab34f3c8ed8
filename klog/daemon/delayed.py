"""The broker's delayed operations: requests that wait in a purgatory for a condition.

DelayedFetch waits until enough new data is readable (or max_wait_ms passes); the fetch
handler awaits its future and then reads again. Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from klog.daemon.purgatory import DelayedOperation


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, enough: Callable[[], bool],
                 done: asyncio.Future[None]) -> None:
        super().__init__(delay_ms)
        self._enough = enough
        self._done = done

    def try_complete(self) -> bool:
        if self._done.done() or self._enough():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        if not self._done.done():
            self._done.set_result(None)

    def on_expiration(self) -> None:
        pass
