"""klog.client.group_coordinator against a real klog broker: subscribe, commits, eager and
cooperative rebalances, static membership, and klog consumers in one group with
librdkafka (confluent-kafka) members."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from klog.client.admin import AdminClient, NewTopic
from klog.client.consumer import Consumer, ConsumerRebalanceListener, NoOffsetForPartitionError
from klog.client.fetcher import TopicPartition as TP
from klog.client.group_coordinator import GroupError, OffsetAndMetadata
from klog.client.producer import Producer
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(90)

FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 100}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with KlogBroker(tmp_path_factory.mktemp("client-groups"), overrides={
            "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3,
            "group.min.session.timeout.ms": 1000}) as b:
        yield b


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def make_topic(bs: str, name: str, partitions: int, records: int = 0) -> None:
    async with AdminClient(bs) as admin:
        errors = await admin.create_topics([NewTopic(name, partitions, 1)])
        assert errors[name] is None
    if records:
        async with Producer(bs) as producer:
            for i in range(records):
                await producer.send(name, value=b"v%d" % i, partition=i % partitions)
            await producer.flush()


async def wait_until(check: Callable[[], bool], timeout: float = 20.0,
                     what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def covers_exactly(assignments: Iterable[set[Any]], topic: str, partitions: int) -> bool:
    seen = [tuple(tp) for a in assignments for tp in a]
    return sorted(seen) == [(topic, p) for p in range(partitions)]


async def drain(consumer: Consumer, want: int, timeout: float = 15.0) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(records) < want and time.monotonic() < deadline:
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            records.extend(batch)
    return records


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TP]]] = []

    def on_partitions_revoked(self, revoked: set[TP]) -> None:
        self.events.append(("revoked", set(revoked)))

    async def on_partitions_assigned(self, assigned: set[TP]) -> None:  # async works too
        self.events.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost: set[TP]) -> None:
        self.events.append(("lost", set(lost)))


def test_subscribe_consume_commit_and_resume_from_committed(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "resume", 4, records=40)
        async with Consumer(bs, group_id="resume-g", auto_offset_reset="earliest",
                            enable_auto_commit=False, **FAST) as c:
            c.subscribe(["resume"])
            assert c.subscription() == {"resume"}
            records = await drain(c, 40)
            assert len(records) == 40
            assert c.assignment() == {TP("resume", p) for p in range(4)}
            await c.commit()
            committed = await c.committed([("resume", p) for p in range(4)])
            assert {tp: om.offset for tp, om in committed.items()} == {
                TP("resume", p): 10 for p in range(4)}
            # An explicit commit with metadata, and a partition never committed.
            await c.commit({("resume", 0): OffsetAndMetadata(7, "checkpoint")})
            got = await c.committed([("resume", 0)])
            assert got[TP("resume", 0)] == OffsetAndMetadata(7, "checkpoint")
        async with Producer(bs) as producer:
            for i in range(8):
                await producer.send("resume", value=b"new%d" % i, partition=i % 4)
            await producer.flush()
        async with Consumer(bs, group_id="resume-g", auto_offset_reset="earliest",
                            enable_auto_commit=False, **FAST) as c:
            c.subscribe(["resume"])
            records = await drain(c, 11, timeout=3)
            # Partition 0 restarts at 7 (3 old records again), the others at 10.
            assert sorted((r.partition, r.offset) for r in records) == sorted(
                [(0, o) for o in range(7, 12)] + [(p, o) for p in (1, 2, 3) for o in (10, 11)])

    run(main())


def test_auto_commit_and_no_offset_reset(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "auto", 2, records=10)
        async with Consumer(bs, group_id="auto-g", auto_offset_reset="earliest",
                            auto_commit_interval_ms=100, **FAST) as c:
            c.subscribe(["auto"])
            assert len(await drain(c, 10)) == 10
            await asyncio.sleep(0.5)  # a few auto commits
            committed = await c.committed([("auto", 0), ("auto", 1)])
            assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 5, 1: 5}
        # auto_offset_reset "none" and nothing committed: the first poll says so.
        async with Consumer(bs, group_id="none-g", auto_offset_reset="none", **FAST) as c:
            c.subscribe(["auto"])
            with pytest.raises(NoOffsetForPartitionError):
                await drain(c, 1, timeout=5)

    run(main())


def test_three_members_eager_range_join_and_leave(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "eager", 6)
        recorders = [Recorder() for _ in range(3)]
        consumers = [Consumer(bs, group_id="eager-g", partition_assignment_strategy=["range"],
                              client_id=f"member-{i}", **FAST) for i in range(3)]
        for c, r in zip(consumers, recorders, strict=True):
            await c.start()
            c.subscribe(["eager"], listener=r)
            await c.getmany(timeout_ms=0)
        await wait_until(lambda: covers_exactly([c.assignment() for c in consumers],
                                                "eager", 6)
                         and all(len(c.assignment()) == 2 for c in consumers),
                         what="3 members with 2 partitions each")
        generation = consumers[0].coordinator.generation_id
        assert {c.coordinator.generation_id for c in consumers} == {generation}
        # Eager: before each rebalance a member revokes everything it has.
        for r in recorders:
            assert {kind for kind, _tps in r.events} <= {"assigned", "revoked"}
        await consumers[2].close()  # LeaveGroup: the others take over at once
        await wait_until(lambda: covers_exactly([c.assignment() for c in consumers[:2]],
                                                "eager", 6), what="2 members covering 6")
        assert recorders[2].events[-1][0] == "revoked"
        for c in consumers[:2]:
            assert c.coordinator.generation_id > generation
            await c.close()

    run(main())


def test_cooperative_sticky_moves_only_what_must_move(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "coop", 6)
        options = dict(group_id="coop-g", partition_assignment_strategy=["cooperative-sticky"],
                       **FAST)
        recorders = [Recorder() for _ in range(3)]
        a, b = (Consumer(bs, client_id=f"coop-{i}", **options) for i in range(2))
        for c, r in ((a, recorders[0]), (b, recorders[1])):
            await c.start()
            c.subscribe(["coop"], listener=r)
        await wait_until(lambda: covers_exactly([a.assignment(), b.assignment()], "coop", 6)
                         and len(a.assignment()) == 3, what="2 members with 3 each")
        before = {"a": a.assignment(), "b": b.assignment()}
        seen = [len(r.events) for r in recorders]
        c3 = Consumer(bs, client_id="coop-2", **options)
        await c3.start()
        c3.subscribe(["coop"], listener=recorders[2])
        await wait_until(lambda: covers_exactly([a.assignment(), b.assignment(),
                                                 c3.assignment()], "coop", 6)
                         and len(c3.assignment()) == 2, what="3 members with 2 each")
        # Sticky: the old members kept 2 of their 3; only the moved ones were revoked.
        assert a.assignment() <= before["a"] and b.assignment() <= before["b"]
        revoked = [tps for r, n in zip(recorders[:2], seen, strict=False)
                   for kind, tps in r.events[n:] if kind == "revoked"]
        assert sum(len(tps) for tps in revoked) == 2
        assert all(kind != "lost" for r in recorders for kind, _ in r.events)
        for c in (a, b, c3):
            await c.close()

    run(main())


def test_static_member_restarts_without_rebalance(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "static", 4)
        options = dict(group_id="static-g", partition_assignment_strategy=["range"], **FAST)
        a = Consumer(bs, group_instance_id="instance-a", **options)
        b = Consumer(bs, group_instance_id="instance-b", **options)
        for c in (a, b):
            await c.start()
            c.subscribe(["static"])
        await wait_until(lambda: covers_exactly([a.assignment(), b.assignment()], "static", 4)
                         and len(a.assignment()) == 2, what="2 static members")
        generation = b.coordinator.generation_id
        kept = a.assignment()
        await a.close()  # a static member does not leave the group
        a = Consumer(bs, group_instance_id="instance-a", **options)
        await a.start()
        a.subscribe(["static"])
        await wait_until(lambda: a.assignment() == kept, what="instance-a back")
        await asyncio.sleep(0.5)  # b heartbeats through it without a rebalance
        assert b.coordinator.generation_id == generation
        assert b.assignment() | a.assignment() == {TP("static", p) for p in range(4)}
        for c in (a, b):
            await c.close()

    run(main())


def test_commit_does_not_queue_behind_a_pending_join(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    class SlowRevoke(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TP]) -> None:
            if revoked:
                await asyncio.sleep(3)  # holds the rebalance open: b rejoins late

    async def main() -> None:
        await make_topic(bs, "busy", 2)
        options = dict(group_id="busy-g", partition_assignment_strategy=["range"], **FAST)
        async with Consumer(bs, **options) as a, Consumer(bs, **options) as b, \
                Consumer(bs, **options) as c:
            a.subscribe(["busy"])
            b.subscribe(["busy"], listener=SlowRevoke())
            await wait_until(lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1,
                             what="2 members")
            c.subscribe(["busy"])  # a rebalance that waits for b's slow revocation

            def a_is_joining() -> bool:
                conn = a.coordinator._join_conn
                return conn is not None and conn.in_flight > 0

            await wait_until(a_is_joining, what="a's JoinGroup in flight")
            started = time.monotonic()
            await a.commit({("busy", 0): 1})
            assert time.monotonic() - started < 1.5
            got = await a.committed([("busy", 0)])
            assert got[TP("busy", 0)] == OffsetAndMetadata(1)
            await wait_until(lambda: covers_exactly(
                [a.assignment(), b.assignment(), c.assignment()], "busy", 2), what="3 members")

    run(main())


def test_member_rides_out_a_broker_restart_and_offsets_survive(
        klog_broker_factory: Callable[..., KlogBroker]) -> None:
    restarting = klog_broker_factory({"group.initial.rebalance.delay.ms": 0,
                                      "offsets.topic.num.partitions": 2,
                                      "group.min.session.timeout.ms": 1000})
    bs = restarting.bootstrap_servers

    async def produce(start: int, count: int) -> None:
        async with Producer(bs) as producer:
            for i in range(start, start + count):
                await producer.send("restart", value=b"%d" % i, partition=i % 2)
            await producer.flush()

    async def main() -> None:
        await make_topic(bs, "restart", 2)
        await produce(0, 20)
        async with Consumer(bs, group_id="restart-g", auto_offset_reset="earliest",
                            enable_auto_commit=False, **FAST) as c:
            c.subscribe(["restart"])
            assert len(await drain(c, 20)) == 20
            await c.commit()
            await asyncio.to_thread(restarting.restart)
            await produce(20, 10)
            values = sorted(int(r.value) for r in await drain(c, 10, timeout=30))
            assert values == list(range(20, 30))
            await c.commit()
        async with Consumer(bs, group_id="restart-g", **FAST) as c:
            committed = await c.committed([("restart", 0), ("restart", 1)])
            assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 15, 1: 15}

    run(main())


def test_assign_with_a_group_id_commits_as_a_simple_consumer(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "simple", 1, records=3)
        async with Consumer(bs, group_id="simple-g", auto_offset_reset="earliest",
                            enable_auto_commit=False) as c:
            c.assign([("simple", 0)])
            assert len(await drain(c, 3)) == 3
            await c.commit()  # generation -1: no membership needed
            assert (await c.committed([("simple", 0)]))[TP("simple", 0)].offset == 3
            with pytest.raises(Exception, match="cannot be mixed"):
                c.subscribe(["simple"])
        # Auto commit of assigned partitions rides on the polls, and on close.
        async with Consumer(bs, group_id="simple-auto", auto_offset_reset="earliest",
                            auto_commit_interval_ms=100) as c:
            c.assign([("simple", 0)])
            assert len(await drain(c, 2)) >= 2
            await asyncio.sleep(0.2)
            await c.getmany(timeout_ms=100)
            await wait_until(lambda: c.coordinator._commit_task is not None
                             and c.coordinator._commit_task.done(), what="auto commit")
            assert (await c.committed([("simple", 0)]))[TP("simple", 0)].offset == 3

    run(main())


def test_a_second_member_with_the_same_instance_id_fences_the_first(
        broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "fence", 1)
        options = dict(group_id="fence-g", group_instance_id="same", **FAST)
        async with Consumer(bs, **options) as old, Consumer(bs, **options) as new:
            old.subscribe(["fence"])
            await wait_until(lambda: bool(old.assignment()), what="old member")
            new.subscribe(["fence"])
            await wait_until(lambda: bool(new.assignment()), what="new member")
            with pytest.raises(GroupError, match="FENCED_INSTANCE_ID"):
                await drain(old, 1, timeout=10)

    run(main())


def test_group_max_size_is_fatal_for_the_extra_member(
        klog_broker_factory: Callable[..., KlogBroker]) -> None:
    small = klog_broker_factory({"group.initial.rebalance.delay.ms": 0,
                                 "offsets.topic.num.partitions": 1, "group.max.size": 1})
    bs = small.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "max", 1)
        async with Consumer(bs, group_id="max-g", **FAST) as first, \
                Consumer(bs, group_id="max-g", **FAST) as second:
            first.subscribe(["max"])
            await wait_until(lambda: bool(first.assignment()), what="first member")
            second.subscribe(["max"])
            with pytest.raises(GroupError, match="GROUP_MAX_SIZE_REACHED"):
                await drain(second, 1, timeout=10)

    run(main())


def test_pattern_subscription_and_unsubscribe(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        for name in ("pat-a", "pat-b", "other"):
            await make_topic(bs, name, 1)
        recorder = Recorder()
        async with Consumer(bs, group_id="pat-g", **FAST) as c:
            c.subscribe(pattern=r"pat-.*", listener=recorder)
            await wait_until(lambda: c.assignment() == {TP("pat-a", 0), TP("pat-b", 0)},
                             what="pattern assignment")
            c.unsubscribe()
            assert c.assignment() == set()
            await wait_until(lambda: recorder.events[-1][0] == "revoked", what="revoke")
            async with AdminClient(bs) as admin:
                await wait_until_async(admin, "pat-g", "Empty")

    run(main())


def test_no_poll_within_max_poll_interval_leaves_then_rejoins(broker: KlogBroker) -> None:
    bs = broker.bootstrap_servers

    async def main() -> None:
        await make_topic(bs, "slow", 2, records=4)
        recorder = Recorder()
        async with Consumer(bs, group_id="slow-g", auto_offset_reset="earliest",
                            max_poll_interval_ms=1000, enable_auto_commit=False,
                            **FAST) as c, AdminClient(bs) as admin:
            c.subscribe(["slow"], listener=recorder)
            assert len(await drain(c, 4)) == 4
            # No poll for longer than max.poll.interval.ms: the member leaves the group and
            # its partitions are lost (another member may own them by now).
            await wait_until_async(admin, "slow-g", "Empty")
            assert c.assignment() == set()
            assert recorder.events[-1][0] == "lost"
            await c.getmany(timeout_ms=5000)  # polling again rejoins
            await wait_until(lambda: len(c.assignment()) == 2, what="rejoined")

    run(main())


async def wait_until_async(admin: AdminClient, group: str, state: str) -> None:
    deadline = time.monotonic() + 10
    while (await admin.describe_groups([group]))[group].state != state:
        assert time.monotonic() < deadline, f"group {group} never became {state}"
        await asyncio.sleep(0.1)


# --- klog's consumer with librdkafka members --------------------------------------------------


class ConfluentMember:
    """A confluent-kafka consumer polling on its own thread; ``assigned`` is its current
    assignment as of the last poll."""

    def __init__(self, bs: str, group: str, topic: str, strategy: str) -> None:
        from confluent_kafka import Consumer as CkConsumer

        self.consumer = CkConsumer({
            "bootstrap.servers": bs, "group.id": group, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 100, "partition.assignment.strategy": strategy,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
        })
        self.consumer.subscribe([topic])
        self.assigned: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)
            self.assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        self.consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_klog_consumer_in_a_group_with_librdkafka_members(broker: KlogBroker,
                                                           strategy: str) -> None:
    bs = broker.bootstrap_servers
    topic, group = f"mixed-{strategy}", f"mixed-{strategy}-g"

    async def main() -> None:
        await make_topic(bs, topic, 6, records=60)
        ours = Consumer(bs, group_id=group, partition_assignment_strategy=[strategy],
                        auto_offset_reset="earliest", **FAST)
        await ours.start()
        ours.subscribe([topic])  # klog's consumer joins first: it leads the group
        await wait_until(lambda: len(ours.assignment()) == 6, what="klog member alone")
        theirs = [ConfluentMember(bs, group, topic, strategy) for _ in range(2)]
        try:
            await wait_until(
                lambda: covers_exactly([ours.assignment(), *(m.assigned for m in theirs)],
                                       topic, 6)
                and all(len(m.assigned) == 2 for m in theirs), timeout=30,
                what="1 klog + 2 librdkafka members with 2 partitions each")
            records = await drain(ours, 20)
            assert {r.partition for r in records} == {tp.partition for tp in ours.assignment()}
            # klog's member leaves; librdkafka's take over its partitions.
            await ours.close()
            await wait_until(lambda: covers_exactly([m.assigned for m in theirs], topic, 6),
                             timeout=30, what="librdkafka members covering all")
            # And a klog member joining a group led by librdkafka gets its share.
            again = Consumer(bs, group_id=group, partition_assignment_strategy=[strategy],
                             **FAST)
            await again.start()
            again.subscribe([topic])
            await wait_until(
                lambda: covers_exactly([again.assignment(), *(m.assigned for m in theirs)],
                                       topic, 6) and len(again.assignment()) == 2,
                timeout=30, what="klog member rejoining a librdkafka-led group")
            await again.close()
        finally:
            for m in theirs:
                m.close()

    run(main())


# --- request building (no broker) ---------------------------------------------------------------


def test_offset_requests_build_and_encode_in_every_version() -> None:
    from klog.client.group_coordinator import (
        MAX_VERSIONS,
        OFFSET_COMMIT,
        OFFSET_FETCH,
        offset_commit_values,
        offset_fetch_values,
    )
    from klog.client.network import build_request
    from klog.protocol import apis

    commit = offset_commit_values("g", {TP("t", 1): OffsetAndMetadata(5, "m"),
                                        TP("t", 0): OffsetAndMetadata(3)},
                                  generation_id=4, member_id="m-1")
    fetch_some = offset_fetch_values("g", [TP("t", 1), TP("u", 0)], require_stable=True)
    fetch_all = offset_fetch_values("g", None)
    for api_key, values in ((OFFSET_COMMIT, commit), (OFFSET_FETCH, fetch_some),
                            (OFFSET_FETCH, fetch_all)):
        lo = apis.KNOWN[api_key][0]
        for version in range(lo, MAX_VERSIONS[api_key] + 1):
            if api_key == OFFSET_FETCH and version < 2 and values is fetch_all:
                continue  # "all partitions" (null topics) exists from v2
            entity = build_request(apis.spec_for(api_key).request_entity(version), values)
            body = apis.encode_request(entity)
            again = apis.decode_request(api_key, version, body)
            if api_key == OFFSET_COMMIT:
                assert [(t.name, [(p.partition_index, p.committed_offset)
                                  for p in t.partitions]) for t in again.topics] == [
                    ("t", [(0, 3), (1, 5)])]
                if version >= 1:  # v0 has no generation and member
                    assert again.member_id == "m-1"
            elif version >= 8:
                assert again.groups[0].group_id == "g"
            else:
                assert again.group_id == "g"
