"""Producer ids for idempotent and transactional producers, unique across the cluster.

This module owns ``ProducerIdManager``: the broker's supply of producer ids, handed out one
by one from blocks of 1000 that the broker claims in the metastore znode
``/latest_producer_id_block``, exactly as Kafka's ZooKeeper-mode ProducerIdManager does:

- read the znode and its version; its JSON (``{"version":1,"broker":B,"block_start":"S",
  "block_end":"E"}``, bounds inclusive, as decimal strings) is the last block any broker
  claimed. An absent or empty node means no block yet: the first block starts at 0;
- write the next block (``block_start`` = last ``block_end`` + 1, this broker's id) with a
  compare-and-set on that version; on BadVersion another broker won the race, so read
  again and retry. A block is therefore claimed by exactly one broker, and ids are never
  handed out twice, even across restarts (a restarted broker claims a fresh block; the
  unused rest of its old one is skipped, as in Kafka).

Kafka's ZooKeeper-mode manager blocks its caller while it talks to ZooKeeper. Here the
metastore calls run in a worker thread (``asyncio.to_thread``), the first block is claimed
in the background from ``start()``, and the next block is prefetched once 90% of the
current one is used (Kafka's KRaft-mode manager prefetches at the same point), so
InitProducerId normally never waits for the metastore.

Locking: a ProducerIdManager lives on the broker's event loop and is not thread-safe; only
``claim_block`` (pure metastore work, no manager state) runs in worker threads. The
metastore's own compare-and-set is what keeps several brokers (or several managers on one
store) apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import (
    BadVersionError,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
)
from klog.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = paths.PRODUCER_ID_BLOCK_SIZE  # Kafka's fixed block size: 1000
PREFETCH_THRESHOLD = 0.9  # fraction of a block used before the next one is fetched
MAX_PRODUCER_ID = 2**63 - 1
# Losing the compare-and-set means another broker claimed a block meanwhile; it cannot
# happen forever unless something rewrites the znode in a loop. Bound the retries anyway so
# a pathological store turns into an error rather than a spinning worker thread.
MAX_CLAIM_ATTEMPTS = 1000
# How long InitProducerId waits for a block being fetched before answering a retriable
# error (the client retries; the fetch goes on).
DEFAULT_WAIT_SECONDS = 10.0


class ProducerIdsUnavailableError(KafkaError):
    """No block of producer ids could be had just now (metastore slow or unreachable).

    COORDINATOR_LOAD_IN_PROGRESS: retriable, and what Kafka's KRaft-mode manager answers
    while it has no block; clients back off and send InitProducerId again.
    """

    error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class ProducerIdsExhaustedError(KafkaError):
    """The next block would pass 2**63 - 1 (Kafka: "Have exhausted all producerIds")."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


def claim_block(
    store: MetadataStore, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE
) -> paths.ProducerIdBlock:
    """Claim the next block of producer ids for ``broker_id`` in ``store`` (blocking).

    Kafka's ZkProducerIdManager.getNewProducerIdBlock: read, compute the next block,
    compare-and-set on the version read; retry when another writer got there first.
    A znode that does not decode raises ZNodeDataError and is left as it is.
    """
    path = paths.LATEST_PRODUCER_ID_BLOCK
    for _attempt in range(MAX_CLAIM_ATTEMPTS):
        try:
            data, stat = store.get(path)
            version: int | None = stat.version
        except NoNodeError:
            data, version = b"", None
        if data:
            current = paths.ProducerIdBlock.decode(data)
            if current.last_producer_id > MAX_PRODUCER_ID - block_size:
                raise ProducerIdsExhaustedError(
                    "have exhausted all producer ids: the last block claimed ends at "
                    f"{current.last_producer_id}"
                )
            block = paths.ProducerIdBlock(broker_id, current.last_producer_id + 1, block_size)
        else:
            block = paths.ProducerIdBlock(broker_id, 0, block_size)
        try:
            if version is None:
                store.create(path, block.encode(), make_parents=True)
            else:
                store.set(path, block.encode(), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # another broker claimed a block (or the node changed): read again
        log.info(
            "broker %d acquired producer id block [%d, %d]",
            broker_id, block.first_producer_id, block.last_producer_id,
        )
        return block
    raise ProducerIdsUnavailableError(
        f"could not claim a producer id block in {MAX_CLAIM_ATTEMPTS} attempts: "
        f"{path} keeps changing"
    )


class ProducerIdManager:
    """Hands out producer ids from blocks claimed in the metastore (see the module doc)."""

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        *,
        block_size: int = PRODUCER_ID_BLOCK_SIZE,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block size must be positive, not {block_size}")
        self.broker_id = broker_id
        self.store = store
        self.block_size = block_size  # Kafka's is fixed at 1000; smaller ones are for tests
        self.wait_seconds = wait_seconds
        self.current_block: paths.ProducerIdBlock | None = None
        self._next_id = 0
        # The block being claimed (or claimed and waiting for the current one to run out).
        self._fetch: asyncio.Future[paths.ProducerIdBlock] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Begin claiming the first block in the background (Kafka claims it at start-up;
        here start-up does not wait for it). Call on the event loop."""
        if self.current_block is None and self._fetch is None:
            self._start_fetch()

    async def close(self) -> None:
        """Wait (bounded) for a claim in flight, so none runs into a closing metastore."""
        fetch, self._fetch = self._fetch, None
        if fetch is not None and not fetch.done():
            # A failure is logged by the fetch's own callback.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(fetch), self.wait_seconds)

    # -- ids ----------------------------------------------------------------------------------

    @property
    def remaining(self) -> int:
        """Ids left in the current block."""
        if self.current_block is None:
            return 0
        return max(0, self.current_block.last_producer_id + 1 - self._next_id)

    async def generate_producer_id(self) -> int:
        """The next producer id; waits for a block only when the current one is used up.

        Raises ProducerIdsUnavailableError (retriable) when no block arrives within
        ``wait_seconds`` or the metastore fails, ProducerIdsExhaustedError when none is left.
        """
        while True:
            block = self.current_block
            if block is not None and self._next_id <= block.last_producer_id:
                producer_id = self._next_id
                self._next_id += 1
                self._maybe_prefetch(block)
                return producer_id
            fetch = self._fetch if self._fetch is not None else self._start_fetch()
            try:
                # shield: a client giving up (its task cancelled) must not cancel the claim
                # that other requests wait for too.
                new_block = await asyncio.wait_for(asyncio.shield(fetch), self.wait_seconds)
            except TimeoutError:
                raise ProducerIdsUnavailableError(
                    f"no producer id block within {self.wait_seconds:g} s: the metadata "
                    "store is slow or unreachable"
                ) from None
            except ProducerIdsExhaustedError:
                if self._fetch is fetch:
                    self._fetch = None
                raise
            except Exception as exc:
                if self._fetch is fetch:
                    self._fetch = None  # the next request tries again
                raise ProducerIdsUnavailableError(
                    f"cannot claim a producer id block: {exc}"
                ) from exc
            if self._fetch is fetch:
                # First waiter back installs the block; the others loop and find it there.
                self._fetch = None
                self._install(new_block)

    def _install(self, block: paths.ProducerIdBlock) -> None:
        self.current_block = block
        self._next_id = block.first_producer_id

    def _maybe_prefetch(self, block: paths.ProducerIdBlock) -> None:
        used = self._next_id - block.first_producer_id
        if self._fetch is None and used >= PREFETCH_THRESHOLD * block.size:
            self._start_fetch()

    def _start_fetch(self) -> asyncio.Future[paths.ProducerIdBlock]:
        loop = asyncio.get_running_loop()
        fetch = loop.create_task(
            asyncio.to_thread(claim_block, self.store, self.broker_id, self.block_size),
            name="klog-producer-id-block",
        )
        fetch.add_done_callback(self._fetch_done)
        self._fetch = fetch
        return fetch

    def _fetch_done(self, fetch: asyncio.Future[paths.ProducerIdBlock]) -> None:
        if fetch.cancelled():
            return
        exc = fetch.exception()  # also marks it retrieved: a failed prefetch is not fatal
        if exc is None:
            return
        log.warning("claiming a producer id block failed: %s", exc)
        if self._fetch is fetch:
            # Forget it: the next request (or the next id past the prefetch threshold)
            # starts a fresh claim instead of meeting this failure again.
            self._fetch = None
