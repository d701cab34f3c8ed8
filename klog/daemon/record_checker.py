"""RecordChecker: the worker threads that validate a client's heavy produce, and the order
its appends keep.

Validation itself is storage's (klog/storage/validator.py, pure and thread-safe); this
module decides where it runs. A partition's records whose check would hold the event loop
-- a compressed batch to inflate, a batch to recompress, a v0/v1 message set to convert,
more uncompressed bytes than one request's inline budget -- are validated in the
checker's own threads (``CHECK_THREADS``: their own pool, so that a flood of compressed
batches cannot starve the default executor's fsyncs and metastore calls, and two threads
bound the inflated bytes held at once). The append they precede still runs on the loop,
after any earlier append to the same partition still being checked (arrival order);
``busy`` tells the replica manager a later, light append must queue behind it too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from klog.protocol.errors import KafkaError
from klog.protocol.records.validate import native as native_record_check
from klog.storage.config import LogConfig
from klog.storage.validator import AppendOrigin, RecordsBuffer, ValidatedRecords, validate_records

log = logging.getLogger(__name__)

# Uncompressed bytes of one produce request whose records are checked on the event loop;
# the rest goes to the record checker's threads. The C walk does a 2 MiB section of the
# smallest records (7 bytes) in about 2 ms, the Python one needs ~1 us per record.
INLINE_CHECK_BYTES = 2 << 20 if native_record_check is not None else 64 << 10
CHECK_THREADS = 2

TopicPartition = tuple[str, int]
R = TypeVar("R")


class RecordChecker(Generic[R]):
    """See the module docstring. ``clock`` gives the ms the validator judges timestamps
    by; ``R`` is what an append answers (the replica manager's ProduceResult)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        # Per partition, the last append whose records are being checked off the loop.
        self._appending: dict[TopicPartition, asyncio.Task[R]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def busy(self, tp: TopicPartition) -> bool:
        """An append to ``tp`` is being checked: a later one must wait for it."""
        return tp in self._appending

    def append_in_order(self, tp: TopicPartition, records: RecordsBuffer, config: LogConfig,
                        finish: Callable[[ValidatedRecords | KafkaError], R]
                        ) -> asyncio.Task[R]:
        """Validate ``records`` in a worker thread, then, on the loop and after the
        partition's earlier appends, ``finish`` them (append the validated records or
        answer the error)."""
        loop = asyncio.get_running_loop()
        checking = loop.run_in_executor(self._checker(), self._validate, records, config)
        task = loop.create_task(self._finish(checking, self._appending.get(tp), finish))
        self._appending[tp] = task

        def done(t: asyncio.Task[R]) -> None:
            if self._appending.get(tp) is t:
                del self._appending[tp]

        task.add_done_callback(done)
        return task

    @staticmethod
    async def _finish(checking: asyncio.Future[ValidatedRecords | KafkaError],
                      before: asyncio.Task[R] | None,
                      finish: Callable[[ValidatedRecords | KafkaError], R]) -> R:
        checked = await checking
        if before is not None:
            await asyncio.wait([before])
        return finish(checked)

    def _validate(self, records: RecordsBuffer, config: LogConfig
                  ) -> ValidatedRecords | KafkaError:
        """A client's records validated in the worker thread: what the log appends, or the
        KafkaError to answer."""
        try:
            return validate_records(records, config, AppendOrigin.CLIENT, self.clock())
        except KafkaError as exc:
            # Only its code and message are answered; without its traceback the refused
            # request's buffers are freed as soon as it is answered.
            return exc.with_traceback(None)
        except Exception as exc:  # a klog bug: answer it, do not lose the connection
            log.exception("checking produced records failed")
            return KafkaError(f"checking the records failed: {exc}")

    def _checker(self) -> ThreadPoolExecutor:
        """The checker's threads, made at first use."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="klog-record-check")
        return self._pool

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
