"""ProducerIdManager and claim_block: Kafka's block allocation on /latest_producer_id_block.

Most tests run on the local (file-backed) metastore; one runs two brokers' managers on
separate sessions of a real ZooKeeper. Stores that stall, fail or race are wrappers that
delegate to a real store and misbehave on cue.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import ConnectionLossError, MetadataStore
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.producer_ids import (
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdManager,
    ProducerIdsExhaustedError,
    ProducerIdsUnavailableError,
    claim_block,
)
from klog.protocol.errors import ErrorCode

PATH = paths.LATEST_PRODUCER_ID_BLOCK


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LocalMetadataStore]:
    s = LocalMetadataStore(tmp_path / "metastore")
    s.start()
    paths.create_persistent_paths(s)  # as the broker does: an empty znode
    yield s
    s.close()


def znode(store: MetadataStore) -> dict[str, Any]:
    data, _stat = store.get(PATH)
    return json.loads(data)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def take(manager: ProducerIdManager, n: int) -> list[int]:
    return [await manager.generate_producer_id() for _ in range(n)]


# -- claim_block -------------------------------------------------------------------------------


def test_first_block_starts_at_zero_and_znode_is_kafkas_json(
        store: LocalMetadataStore) -> None:
    assert store.get(PATH)[0] == b""  # create_persistent_paths leaves it empty
    block = claim_block(store, broker_id=3)
    assert (block.first_producer_id, block.last_producer_id) == (0, 999)
    assert block.assigned_broker_id == 3
    # Kafka's ProducerIdBlockZNode JSON: bounds inclusive, as decimal strings.
    assert znode(store) == {"version": 1, "broker": 3, "block_start": "0", "block_end": "999"}
    second = claim_block(store, broker_id=4)
    assert (second.first_producer_id, second.last_producer_id) == (1000, 1999)
    assert znode(store) == {"version": 1, "broker": 4, "block_start": "1000",
                            "block_end": "1999"}
    assert store.get(PATH)[1].version == 2


def test_claim_creates_a_missing_znode(tmp_path: Path) -> None:
    with LocalMetadataStore(tmp_path / "m") as s:
        block = claim_block(s, broker_id=0)
        assert block.first_producer_id == 0
        assert znode(s)["block_end"] == "999"


def test_claim_continues_after_a_block_kafka_wrote(store: LocalMetadataStore) -> None:
    # As a Kafka 2.x/3.x broker leaves it (possibly with extra spacing / numbers as text).
    store.set(PATH, b'{"version":1,"broker":0,"block_start":"41000","block_end":"41999"}')
    block = claim_block(store, broker_id=1)
    assert (block.first_producer_id, block.last_producer_id) == (42000, 42999)


def test_concurrent_claims_from_many_threads_are_disjoint_and_contiguous(
        store: LocalMetadataStore) -> None:
    blocks: list[paths.ProducerIdBlock] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(broker_id: int) -> None:
        barrier.wait()
        for _ in range(25):
            b = claim_block(store, broker_id, block_size=10)
            with lock:
                blocks.append(b)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    starts = sorted(b.first_producer_id for b in blocks)
    assert starts == list(range(0, 200 * 10, 10))  # 200 blocks, none twice, no gaps
    assert int(znode(store)["block_end"]) == 1999


class RacingStore:
    """Delegates to ``inner``; before each of its first ``races`` sets of the block znode,
    another 'broker' claims a block, so the set meets a BadVersion."""

    def __init__(self, inner: MetadataStore, races: int) -> None:
        self.inner = inner
        self.races = races
        self.sets = 0

    def get(self, path: str, watch: Any = None) -> Any:
        return self.inner.get(path)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.create(*args, **kwargs)

    def set(self, path: str, data: bytes, version: int = -1) -> Any:
        self.sets += 1
        if self.races > 0:
            self.races -= 1
            claim_block(self.inner, broker_id=99)
        return self.inner.set(path, data, version)


def test_bad_version_means_retry_after_the_winners_block(store: LocalMetadataStore) -> None:
    racing = RacingStore(store, races=3)
    block = claim_block(racing, broker_id=1)  # type: ignore[arg-type]
    assert racing.sets == 4
    # The three competing claims took [0, 2999]; ours is the next one, not a copy.
    assert (block.first_producer_id, block.last_producer_id) == (3000, 3999)
    assert znode(store)["broker"] == 1


def test_exhausted_ids(store: LocalMetadataStore) -> None:
    end = 2**63 - 1 - 500
    store.set(PATH, paths.ProducerIdBlock(0, end - 999).encode())
    with pytest.raises(ProducerIdsExhaustedError, match="exhausted"):
        claim_block(store, broker_id=1)
    assert int(znode(store)["block_end"]) == end  # untouched


def test_undecodable_znode_is_an_error_and_left_alone(store: LocalMetadataStore) -> None:
    store.set(PATH, b'{"version":1,"broker":0,"block_start":"x"}')
    with pytest.raises(paths.ZNodeDataError):
        claim_block(store, broker_id=1)
    assert store.get(PATH)[0] == b'{"version":1,"broker":0,"block_start":"x"}'

    async def main() -> None:
        manager = ProducerIdManager(1, store)
        with pytest.raises(ProducerIdsUnavailableError) as info:
            await manager.generate_producer_id()
        assert info.value.error_code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    run(main())


# -- ProducerIdManager -------------------------------------------------------------------------


def test_ids_are_sequential_across_blocks(store: LocalMetadataStore) -> None:
    async def main() -> None:
        manager = ProducerIdManager(1, store, block_size=PRODUCER_ID_BLOCK_SIZE)
        manager.start()
        ids = await take(manager, 2500)
        assert ids == list(range(2500))
        assert manager.current_block is not None
        assert manager.current_block.first_producer_id == 2000
        await manager.close()

    run(main())


def test_two_managers_on_one_store_never_overlap(store: LocalMetadataStore) -> None:
    async def main() -> None:
        a = ProducerIdManager(1, store, block_size=7)
        b = ProducerIdManager(2, store, block_size=7)
        a.start()
        b.start()
        rng = random.Random(5)
        got: dict[int, list[int]] = {1: [], 2: []}
        for _ in range(600):
            m = a if rng.random() < 0.5 else b
            got[m.broker_id].append(await m.generate_producer_id())
        # Also concurrently: many requests at once on both.
        more = await asyncio.gather(*(m.generate_producer_id()
                                      for m in [a, b] * 100))
        everything = got[1] + got[2] + list(more)
        assert len(set(everything)) == len(everything) == 800
        assert got[1] == sorted(got[1]) and got[2] == sorted(got[2])
        await a.close()
        await b.close()

    run(main())


def test_restart_continues_after_the_last_block(tmp_path: Path) -> None:
    directory = tmp_path / "metastore"

    async def session(broker_id: int, n: int) -> list[int]:
        with LocalMetadataStore(directory) as s:
            manager = ProducerIdManager(broker_id, s)
            manager.start()
            ids = await take(manager, n)
            await manager.close()
            return ids

    first = run(session(1, 5))
    assert first == [0, 1, 2, 3, 4]
    # The rest of block 0 is skipped, as in Kafka: the restarted broker claims a new one.
    second = run(session(1, 3))
    assert second == [1000, 1001, 1002]
    third = run(session(2, 1))
    assert third == [2000]


def test_prefetch_claims_the_next_block_before_the_current_runs_out(
        store: LocalMetadataStore) -> None:
    async def main() -> None:
        manager = ProducerIdManager(1, store, block_size=10)
        assert await manager.generate_producer_id() == 0
        assert znode(store)["block_end"] == "9"
        await take(manager, 8)  # ids 1..8: 9 of 10 used, the prefetch starts
        assert manager._fetch is not None
        await asyncio.wait_for(asyncio.shield(manager._fetch), 5)
        assert znode(store)["block_start"] == "10"  # claimed ahead
        assert manager.current_block is not None
        assert manager.current_block.first_producer_id == 0  # still on the first block
        assert manager.remaining == 1
        assert await take(manager, 3) == [9, 10, 11]
        await manager.close()

    run(main())


class StallingStore:
    """Delegates to ``inner``; sets wait on ``gate`` and may fail a number of times."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.gate = threading.Event()
        self.gate.set()
        self.failures = 0

    def get(self, path: str, watch: Any = None) -> Any:
        return self.inner.get(path)

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.create(*args, **kwargs)

    def set(self, path: str, data: bytes, version: int = -1) -> Any:
        if not self.gate.wait(10):
            raise ConnectionLossError("stalled too long", path)
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionLossError("injected", path)
        return self.inner.set(path, data, version)


def test_a_stalled_metastore_gives_a_retriable_error_then_recovers(
        store: LocalMetadataStore) -> None:
    stalling = StallingStore(store)
    stalling.gate.clear()

    async def main() -> None:
        manager = ProducerIdManager(1, stalling, wait_seconds=0.2)  # type: ignore[arg-type]
        manager.start()
        with pytest.raises(ProducerIdsUnavailableError, match="slow or unreachable"):
            await manager.generate_producer_id()
        # A waiter that gives up (cancelled) does not cancel the claim others wait for.
        waiter = asyncio.ensure_future(manager.generate_producer_id())
        await asyncio.sleep(0.05)
        waiter.cancel()
        fetch = manager._fetch
        assert fetch is not None and not fetch.cancelled()
        stalling.gate.set()
        assert await manager.generate_producer_id() == 0
        assert fetch.done() and not fetch.cancelled()
        await manager.close()

    run(main())


def test_a_failed_claim_is_retried_by_the_next_request(store: LocalMetadataStore) -> None:
    failing = StallingStore(store)
    failing.failures = 1

    async def main() -> None:
        manager = ProducerIdManager(1, failing)  # type: ignore[arg-type]
        with pytest.raises(ProducerIdsUnavailableError, match="injected"):
            await manager.generate_producer_id()
        assert await manager.generate_producer_id() == 0
        await manager.close()

    run(main())


def test_a_failed_prefetch_does_not_interrupt_ids(store: LocalMetadataStore) -> None:
    failing = StallingStore(store)

    async def main() -> None:
        manager = ProducerIdManager(1, failing, block_size=10)  # type: ignore[arg-type]
        assert await take(manager, 5) == [0, 1, 2, 3, 4]
        failing.failures = 1
        assert await take(manager, 4) == [5, 6, 7, 8]  # the prefetch starts and fails
        fetch = manager._fetch
        if fetch is not None:
            with pytest.raises(ConnectionLossError):
                await fetch
        assert await take(manager, 3) == [9, 10, 11]  # a new claim, made in time
        await manager.close()

    run(main())


def test_two_brokers_on_a_real_zookeeper_never_overlap(tmp_path: Path) -> None:
    from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
    from tests.zkserver import ZooKeeperServer, zookeeper_unavailable_reason

    reason = zookeeper_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    with ZooKeeperServer(tmp_path / "zk") as zk:
        stores = [ZooKeeperMetadataStore(zk.connect + "/kafka", session_timeout_ms=4000,
                                         connection_timeout_ms=10000) for _ in range(2)]
        for s in stores:
            s.start()
        try:
            paths.create_persistent_paths(stores[0])

            async def main() -> list[int]:
                managers = [ProducerIdManager(i, s, block_size=5)
                            for i, s in enumerate(stores)]
                ids = await asyncio.gather(*(m.generate_producer_id()
                                             for m in managers * 60))
                for m in managers:
                    await m.close()
                return list(ids)

            ids = run(main())
            assert len(set(ids)) == len(ids) == 120
            block = paths.ProducerIdBlock.decode(stores[1].get(PATH)[0])
            assert block.last_producer_id >= max(ids)
        finally:
            for s in stores:
                s.close()
