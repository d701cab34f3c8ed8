"""Replication between two real in-process brokers on one loop (each standalone on its own
metastore; the tests hand out LeaderAndIsr themselves): follower fetches, ISR expansion
written to the state znode + /isr_change_notification, acks=-1 in the produce purgatory
with min.insync.replicas, ISR shrink, truncation of a divergent follower tail through
OffsetForLeaderEpoch, and OffsetForLeaderEpoch / follower fetches over a real socket."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from klog.daemon.admin_rules import TopicSpec
from klog.daemon.broker import Broker
from klog.daemon.config import BrokerConfig
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import iter_batch_headers
from klog.protocol.records.v2 import build_batch, iter_records
from tests.daemon.wire import running_broker


def _become(broker: Broker, states: list[PartitionState], topic_ids: dict[str, uuid.UUID]
            ) -> dict[tuple[str, int], int]:
    """Apply a LeaderAndIsr decision past fencing, as the controller's would be."""
    return broker.control_requests.become_leader_or_follower(states, topic_ids)


def _config(log_dir: Path, **extra: str) -> BrokerConfig:
    props = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir),
             "replica.fetch.wait.max.ms": "100", "replica.fetch.backoff.ms": "50", **extra}
    return BrokerConfig.from_dict(props)


def run(coro_fn: Callable[[], object]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 60))  # type: ignore[arg-type]


def _batch(*values: bytes) -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(build_batch([(now, None, v) for v in values]))


@asynccontextmanager
async def two_brokers(tmp_path: Path, **extra: str) -> AsyncIterator[tuple[Broker, Broker]]:
    b1 = Broker(_config(tmp_path / "b1", **{"broker.id": "1", **extra}))
    b2 = Broker(_config(tmp_path / "b2", **{"broker.id": "2", **extra}))
    await b1.start()
    await b2.start()
    # The follower finds its leader as UpdateMetadata would tell it.
    # (Not the other way round: the leader's admin would then place replicas on 2.)
    b2.metadata_cache.brokers[1] = b1.metadata_cache.brokers[1]
    try:
        yield b1, b2
    finally:
        await b2.shutdown()
        await b1.shutdown()


async def _replicate(leader: Broker, follower: Broker, topic: str,
                     isr: tuple[int, ...] = (1,)) -> PartitionState:
    """Make ``topic``-0 (created on the leader, RF 1) a (1, 2) partition led by 1."""
    await leader.admin.create_topics([TopicSpec(topic, 1, 1)])
    assert leader.metastore is not None
    data, stat = leader.metastore.get(paths.partition_state_path(topic, 0))
    st = paths.LeaderIsrAndControllerEpoch.decode(data)
    state = PartitionState(topic, 0, 1, st.leader_epoch + 1, (1, 2), isr, st.controller_epoch,
                           stat.version)
    assert _become(leader, [state], {})[(topic, 0)] == 0
    assert _become(follower, [state], {})[(topic, 0)] == 0
    return state


async def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def _partition(broker: Broker, topic: str) -> object:
    assert broker.replica_manager is not None
    p = broker.replica_manager.get_partition(topic, 0)
    assert p is not None
    return p


def _log_bytes(broker: Broker, topic: str) -> bytes:
    p = _partition(broker, topic)
    return p.log.read(0, 1 << 30).read_bytes()  # type: ignore[attr-defined]


def _values(raw: bytes) -> list[bytes | None]:
    return [r.value for h in iter_batch_headers(raw) for r in iter_records(raw, h)]


async def _produce(broker: Broker, topic: str, acks: int, *values: bytes,
                   timeout_ms: int = 5000) -> tuple[int, int]:
    rm = broker.replica_manager
    assert rm is not None
    results = rm.append_records({(topic, 0): _batch(*values)}, acks)
    if acks == -1:
        results = await rm.wait_for_isr(results, timeout_ms)
    r = results[(topic, 0)]
    return r.error_code, r.base_offset


def test_follower_replicates_and_joins_the_isr(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as (b1, b2):
            state = await _replicate(b1, b2, "t")
            for i in range(5):
                assert (await _produce(b1, "t", 1, b"v%d" % i, b"w%d" % i))[0] == 0
            leader, follower = _partition(b1, "t"), _partition(b2, "t")
            await _until(lambda: follower.log_end_offset == 10)  # type: ignore[attr-defined]
            await _until(lambda: leader.isr == (1, 2))  # type: ignore[attr-defined]
            await _until(lambda: follower.high_watermark == 10)  # type: ignore[attr-defined]
            assert leader.high_watermark == 10  # type: ignore[attr-defined]
            assert _log_bytes(b1, "t") == _log_bytes(b2, "t")
            # The ISR change went to the state znode by compare-and-set ...
            assert b1.metastore is not None
            data, stat = b1.metastore.get(paths.partition_state_path("t", 0))
            written = paths.LeaderIsrAndControllerEpoch.decode(data)
            assert (written.leader, written.leader_epoch, written.isr) == \
                (1, state.leader_epoch, (1, 2))
            assert stat.version == state.zk_version + 1 == leader.zk_version  # type: ignore
            # ... and is announced under /isr_change_notification.
            rm = b1.replica_manager
            assert rm is not None and rm.isr_manager.changes == {("t", 0)}
            assert await rm.isr_manager.maybe_propagate_isr_changes(force=True)
            names = b1.metastore.get_children(paths.ISR_CHANGE_NOTIFICATION)
            assert len(names) == 1 and names[0].startswith("isr_change_")
            note, _ = b1.metastore.get(f"{paths.ISR_CHANGE_NOTIFICATION}/{names[0]}")
            assert paths.IsrChangeNotification.decode(note).partitions == (("t", 0),)
            assert rm.isr_manager.changes == set()
            # The leader epoch is on every batch, and in both epoch caches.
            raw = _log_bytes(b2, "t")
            assert {h.partition_leader_epoch for h in iter_batch_headers(raw)} == \
                {state.leader_epoch}
            assert follower.log.leader_epoch_cache.latest_epoch == state.leader_epoch  # type: ignore
            # Consumers of the follower's partition are refused; of the leader's, served.
            assert b2.replica_manager is not None
            r = b2.replica_manager.read("t", 0, 0, 1 << 20, isolation_committed=False,
                                        from_follower=False, min_one_message=True)
            assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(go)


def test_acks_all_waits_for_the_isr_and_min_insync_replicas(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path, **{"replica.lag.time.max.ms": "600",
                                            "min.insync.replicas": "2"}) as (b1, b2):
            await _replicate(b1, b2, "t", isr=(1, 2))
            leader = _partition(b1, "t")
            error, offset = await _produce(b1, "t", -1, b"a", b"b")
            assert (error, offset) == (0, 0)
            assert leader.high_watermark >= 2  # type: ignore[attr-defined]
            assert _partition(b2, "t").log_end_offset >= 2  # type: ignore[attr-defined]
            # The follower stops fetching: acks=-1 times out (Kafka: REQUEST_TIMED_OUT) ...
            assert b2.fetcher_manager is not None
            b2.fetcher_manager.remove_partitions([("t", 0)])
            started = time.monotonic()
            error, _ = await _produce(b1, "t", -1, b"c", timeout_ms=200)
            assert error == ErrorCode.REQUEST_TIMED_OUT
            assert 0.15 < time.monotonic() - started < 2
            # ... a request still waiting when the ISR shrinks below min.insync.replicas
            # completes with NOT_ENOUGH_REPLICAS_AFTER_APPEND once the HW covers it ...
            error, _ = await _produce(b1, "t", -1, b"d", timeout_ms=10_000)
            assert error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            assert leader.isr == (1,)  # type: ignore[attr-defined]
            assert leader.high_watermark == leader.log_end_offset == 4  # type: ignore
            # ... and the next one is refused before the append.
            error, _ = await _produce(b1, "t", -1, b"e")
            assert error == ErrorCode.NOT_ENOUGH_REPLICAS
            assert leader.log_end_offset == 4  # type: ignore[attr-defined]
            assert (await _produce(b1, "t", 1, b"f"))[0] == 0  # acks=1 still works
            # The follower comes back, catches up and rejoins the ISR.
            b2.fetcher_manager.add_partitions({("t", 0): (1, leader.leader_epoch)})  # type: ignore
            await _until(lambda: leader.isr == (1, 2))  # type: ignore[attr-defined]
            assert (await _produce(b1, "t", -1, b"g"))[0] == 0
            await _until(lambda: _log_bytes(b1, "t") == _log_bytes(b2, "t"))

    run(go)


def test_divergent_follower_tail_is_truncated_by_leader_epoch(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as (b1, b2):
            state = await _replicate(b1, b2, "t", isr=(1, 2))
            e = state.leader_epoch
            for i in range(3):
                await _produce(b1, "t", -1, b"common%d" % i)
            follower = _partition(b2, "t")
            await _until(lambda: follower.log_end_offset == 3)  # type: ignore[attr-defined]
            # Broker 2 is (wrongly, isolated) made leader at e+1 and takes writes that never
            # reach broker 1.
            _become(b2, [PartitionState("t", 0, 2, e + 1, (1, 2), (2,))], {})
            for i in range(4):
                assert (await _produce(b2, "t", 1, b"lost%d" % i))[0] == 0
            # Broker 1 leads again at e+2 and takes different writes at the same offsets.
            _become(b1, [PartitionState("t", 0, 1, e + 2, (1, 2), (1,),
                                                    state.controller_epoch,
                                                    _partition(b1, "t").zk_version)], {})
            await _produce(b1, "t", 1, b"kept0", b"kept1")
            assert follower.log_end_offset == 7  # type: ignore[attr-defined]
            # Broker 2 follows at e+2: OffsetForLeaderEpoch(e+1) -> (e, 3): truncate to 3.
            _become(b2, [PartitionState("t", 0, 1, e + 2, (1, 2), (1,))], {})
            await _until(lambda: _log_bytes(b1, "t") == _log_bytes(b2, "t"))
            assert _values(_log_bytes(b2, "t")) == [b"common0", b"common1", b"common2",
                                                     b"kept0", b"kept1"]
            cache = follower.log.leader_epoch_cache  # type: ignore[attr-defined]
            assert [(x.epoch, x.start_offset) for x in cache.entries] == [(e, 0), (e + 2, 3)]

    run(go)


def test_an_older_leader_and_isr_is_ignored(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as (b1, b2):
            state = await _replicate(b1, b2, "t")
            stale = PartitionState("t", 0, 2, state.leader_epoch - 1, (1, 2), (2,))
            assert _become(b1, [stale], {})[("t", 0)] == \
                ErrorCode.FENCED_LEADER_EPOCH
            assert _partition(b1, "t").is_leader  # type: ignore[attr-defined]

    run(go)


def test_offset_for_leader_epoch_and_follower_fetch_over_a_socket(tmp_path: Path) -> None:
    with running_broker(tmp_path) as node:
        asyncio.run_coroutine_threadsafe(
            node.broker.admin.create_topics([TopicSpec("t", 1, 1)]), node.loop).result(10)
        rm = node.broker.replica_manager

        def setup() -> int:
            p = rm.get_partition("t", 0)
            epoch = p.leader_epoch
            rm.append_records({("t", 0): _batch(b"a", b"b")}, 1)
            # A new leadership (epoch + 3) with a follower 2, which has not fetched yet.
            _become(node.broker, [PartitionState(
                "t", 0, node.broker.broker_id, epoch + 3, (node.broker.broker_id, 2),
                (node.broker.broker_id, 2), p.controller_epoch, p.zk_version)], {})
            rm.append_records({("t", 0): _batch(b"c")}, 1)
            return epoch

        epoch = node.call(setup)
        new = epoch + 3
        with node.connect() as client:
            for version in (2, 3, 4):
                values = {"replica_id": -1, "topics": [{"topic": "t", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch},
                    {"partition": 0, "current_leader_epoch": new, "leader_epoch": epoch + 1},
                    {"partition": 0, "current_leader_epoch": new, "leader_epoch": new},
                    {"partition": 0, "current_leader_epoch": new, "leader_epoch": new + 5},
                    {"partition": 0, "current_leader_epoch": new - 1, "leader_epoch": epoch},
                    {"partition": 0, "current_leader_epoch": new + 1, "leader_epoch": epoch},
                    {"partition": 7, "current_leader_epoch": -1, "leader_epoch": epoch},
                ]}]}
                resp = client.call(23, version, values)
                got = [(int(r.error_code), r.leader_epoch, r.end_offset)
                       for r in resp.topics[0].partitions]
                assert got == [
                    (0, epoch, 2),  # epoch ends where the new one starts
                    (0, epoch, 2),  # largest epoch <= epoch + 1
                    (0, new, 3),  # the latest epoch ends at the log end offset
                    (0, -1, -1),  # unknown, newer epoch
                    (ErrorCode.FENCED_LEADER_EPOCH, -1, -1),
                    (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
                    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
                ], version

            def fetch(replica_id: int, offset: int, current: int = new) -> object:
                resp = client.call(1, 12, {
                    "replica_id": replica_id, "max_wait": 0, "min_bytes": 0,
                    "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                    "session_epoch": -1, "topics": [{"topic": "t", "partitions": [{
                        "partition": 0, "current_leader_epoch": current,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1, "log_start_offset": 0,
                        "partition_max_bytes": 1 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
                return resp.responses[0].partitions[0]

            # A consumer sees nothing: the HW waits for follower 2 (ISR (1, 2)).
            consumer = fetch(-1, 0)
            assert (consumer.error_code, consumer.high_watermark) == (0, 2)
            assert _values(bytes(consumer.records or b"")) == [b"a", b"b"]
            # The follower gets everything up to the log end offset.
            follower = fetch(2, 0)
            assert _values(bytes(follower.records)) == [b"a", b"b", b"c"]
            # Its next fetch (from 3) moves the HW to 3, which the answer carries.
            assert fetch(2, 3).high_watermark == 3
            assert _values(bytes(fetch(-1, 2).records)) == [b"c"]
            # Epochs: an older one is fenced, a newer one unknown, for followers and
            # consumers alike.
            for replica_id in (2, -1):
                assert fetch(replica_id, 0, new - 1).error_code == \
                    ErrorCode.FENCED_LEADER_EPOCH
                assert fetch(replica_id, 0, new + 1).error_code == \
                    ErrorCode.UNKNOWN_LEADER_EPOCH
            # A broker that is no replica reads nothing (Kafka's followerReplicaOrThrow):
            # UNKNOWN_LEADER_EPOCH when it names the epoch, else NOT_LEADER_OR_FOLLOWER.
            stranger = fetch(9, 0)
            assert (stranger.error_code, bytes(stranger.records or b"")) == \
                (ErrorCode.UNKNOWN_LEADER_EPOCH, b"")
            assert fetch(9, 0, -1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_stale_zk_version_of_the_same_leadership_is_adopted(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as (b1, b2):
            await b1.admin.create_topics([TopicSpec("t", 1, 1)])
            assert b1.metastore is not None
            path = paths.partition_state_path("t", 0)
            data, stat = b1.metastore.get(path)
            st = paths.LeaderIsrAndControllerEpoch.decode(data)
            state = PartitionState("t", 0, 1, st.leader_epoch + 1, (1, 2), (1,),
                                   st.controller_epoch, stat.version)
            # The znode holds this leadership's state, at a version LeaderAndIsr did not say.
            b1.metastore.set(path, paths.LeaderIsrAndControllerEpoch(
                1, state.leader_epoch, (1,), st.controller_epoch).encode())
            _become(b1, [state], {})
            _become(b2, [state], {})
            await _produce(b1, "t", 1, b"a")
            leader = _partition(b1, "t")
            await _until(lambda: leader.isr == (1, 2))  # type: ignore[attr-defined]
            data, stat = b1.metastore.get(path)
            assert paths.LeaderIsrAndControllerEpoch.decode(data).isr == (1, 2)
            assert leader.zk_version == stat.version == state.zk_version + 2  # type: ignore

            # A state znode of another leadership is not adopted.
            b1.metastore.set(path, paths.LeaderIsrAndControllerEpoch(
                2, state.leader_epoch + 1, (2,), st.controller_epoch).encode())
            leader.propose_isr((1,))  # type: ignore[attr-defined]
            await _until(lambda: leader.pending_isr is None)  # type: ignore[attr-defined]
            assert leader.isr == (1, 2)  # type: ignore[attr-defined]

    run(go)


def test_waiting_acks_all_produce_answers_when_leadership_goes(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as (b1, b2):
            state = await _replicate(b1, b2, "t", isr=(1, 2))
            assert b2.fetcher_manager is not None
            b2.fetcher_manager.remove_partitions([("t", 0)])  # the follower falls silent
            waiting = asyncio.ensure_future(_produce(b1, "t", -1, b"a", timeout_ms=30_000))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            # Broker 1 becomes a follower: the request is answered at once.
            _become(b1, [PartitionState("t", 0, 2, state.leader_epoch + 1, (1, 2),
                                                    (2,))], {})
            assert (await asyncio.wait_for(waiting, 2))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            # Same for StopReplica.
            _become(b2, [PartitionState("t", 0, 2, state.leader_epoch + 1, (1, 2),
                                                    (1, 2))], {})
            assert b1.fetcher_manager is not None
            b1.fetcher_manager.remove_partitions([("t", 0)])
            waiting = asyncio.ensure_future(_produce(b2, "t", -1, b"b", timeout_ms=30_000))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            b2.control_requests.stop_replicas([("t", 0)], False)
            assert (await asyncio.wait_for(waiting, 2))[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER

    run(go)


def test_a_follower_behind_the_leaders_log_start_starts_over_there(tmp_path: Path) -> None:
    async def go() -> None:
        async with two_brokers(tmp_path) as (b1, b2):
            await b1.admin.create_topics([TopicSpec("t", 1, 1)])
            for i in range(10):
                await _produce(b1, "t", 1, b"v%d" % i)
            leader = _partition(b1, "t")
            assert leader.log.maybe_increment_log_start_offset(6)  # type: ignore[attr-defined]
            assert b1.metastore is not None
            _data, stat = b1.metastore.get(paths.partition_state_path("t", 0))
            state = PartitionState("t", 0, 1, leader.leader_epoch + 1, (1, 2), (1,),  # type: ignore
                                   1, stat.version)
            _become(b1, [state], {})
            _become(b2, [state], {})
            follower = _partition(b2, "t")
            await _until(lambda: follower.log_end_offset == 10)  # type: ignore[attr-defined]
            assert follower.log_start_offset == 6  # type: ignore[attr-defined]
            raw = follower.log.read(6, 1 << 20).read_bytes()  # type: ignore[attr-defined]
            assert _values(raw) == [b"v%d" % i for i in range(6, 10)]
            await _until(lambda: leader.isr == (1, 2))  # type: ignore[attr-defined]

    run(go)
