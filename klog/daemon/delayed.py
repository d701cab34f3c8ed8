"""The broker's delayed operations: requests that wait in a purgatory for a condition.

DelayedFetch waits until enough new data is readable (or max_wait_ms passes); the fetch
handler awaits its future and then reads again. DelayedProduce (acks=-1) waits until every
partition's high watermark has reached the end of what the request appended -- i.e. the
whole ISR has it -- or the request's timeout passes (Kafka's DelayedProduce). Everything
runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from klog.daemon.purgatory import DelayedOperation
from klog.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]


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


class DelayedProduce(DelayedOperation):
    """Waits for ``required`` (partition -> offset the high watermark must reach).

    ``check(tp, offset)`` answers (done, error code) for one partition, as Kafka's
    Partition.checkEnoughReplicasReachOffset: done with no error once the high watermark
    has reached the offset and the ISR still has min.insync.replicas members; done with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when it reached it on a smaller ISR; done with
    NOT_LEADER_OR_FOLLOWER when leadership moved. A partition still pending at the timeout
    answers REQUEST_TIMED_OUT, as in Kafka. ``done`` gets partition -> error code.
    """

    def __init__(self, delay_ms: int, required: dict[TopicPartition, int],
                 check: Callable[[TopicPartition, int], tuple[bool, int]],
                 done: asyncio.Future[dict[TopicPartition, int]]) -> None:
        super().__init__(delay_ms)
        self._pending = dict(required)
        self._errors: dict[TopicPartition, int] = {}
        self._check = check
        self._done = done

    def try_complete(self) -> bool:
        for tp, offset in list(self._pending.items()):
            finished, error = self._check(tp, offset)
            if finished:
                del self._pending[tp]
                self._errors[tp] = error
        if not self._pending or self._done.done():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for tp in self._pending:
            self._errors[tp] = int(ErrorCode.REQUEST_TIMED_OUT)
        if not self._done.done():
            self._done.set_result(self._errors)
