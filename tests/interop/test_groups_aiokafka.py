"""aiokafka consumer groups against a klog broker.

Three AIOKafkaConsumers in one event loop share a topic: their assignments cover every
partition exactly once; one stops (LeaveGroup) and the other two take over; a new member
rejoins and the group spreads out again. Commits by a group member are read back. A member
in another process is killed with SIGKILL (no LeaveGroup): the session timeout evicts it
and the two others take its partitions.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from klog.testing import KlogBroker

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.min.session.timeout.ms": "500", "offsets.topic.num.partitions": "4"}


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()


def make_consumer(bootstrap: str, group: str, topic: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=2000,
        heartbeat_interval_ms=200, auto_offset_reset="earliest", enable_auto_commit=False,
        metadata_max_age_ms=1000)


async def settle(consumers: list[AIOKafkaConsumer], deadline_s: float = 25.0) -> list[set[int]]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    stable_since = None
    while True:
        await asyncio.sleep(0.05)
        parts = [{tp.partition for tp in c.assignment()} for c in consumers]
        every = sorted(p for ps in parts for p in ps)
        if every == list(range(PARTITIONS)) and all(parts):
            stable_since = stable_since or loop.time()
            if loop.time() - stable_since > 0.6:
                return parts
        else:
            stable_since = None
        assert loop.time() < deadline, f"no complete assignment: {parts}"


def test_three_members_join_and_leave(broker: KlogBroker, topic: str) -> None:
    async def main() -> None:
        bootstrap = broker.bootstrap_servers
        await create_topic(bootstrap, topic)
        group = f"aio-{topic}"
        consumers = [make_consumer(bootstrap, group, topic) for _ in range(3)]
        try:
            for c in consumers:
                await c.start()
            parts = await settle(consumers)
            assert sorted(len(p) for p in parts) == [2, 2, 2]
            await consumers[0].stop()
            parts = await settle(consumers[1:])
            assert sorted(len(p) for p in parts) == [3, 3]
            consumers[0] = make_consumer(bootstrap, group, topic)
            await consumers[0].start()
            parts = await settle(consumers)
            assert sorted(len(p) for p in parts) == [2, 2, 2]
            # A member commits what it holds and reads it back.
            member = consumers[1]
            mine = sorted(member.assignment())
            await member.commit({tp: 7 + tp.partition for tp in mine})
            for tp in mine:
                assert await member.committed(tp) == 7 + tp.partition
            other = TopicPartition(topic, next(iter(parts[0])))
            assert await consumers[0].committed(other) is None
        finally:
            for c in consumers:
                await c.stop()

    asyncio.run(asyncio.wait_for(main(), 60))


CRASHER = r"""
import asyncio, sys
from aiokafka import AIOKafkaConsumer
bootstrap, group, topic = sys.argv[1:4]
async def main():
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                session_timeout_ms=2000, heartbeat_interval_ms=200,
                                enable_auto_commit=False, metadata_max_age_ms=1000)
    await consumer.start()
    told = False
    while True:
        await consumer.getmany(timeout_ms=50)
        if consumer.assignment() and not told:
            print("ASSIGNED", flush=True)
            told = True
asyncio.run(main())
"""


def test_a_crashed_member_is_evicted_by_the_session_timeout(broker: KlogBroker,
                                                             topic: str) -> None:
    async def main() -> None:
        bootstrap = broker.bootstrap_servers
        await create_topic(bootstrap, topic)
        group = f"aio-crash-{topic}"
        consumers = [make_consumer(bootstrap, group, topic) for _ in range(2)]
        crasher = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CRASHER, bootstrap, group, topic,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        try:
            for c in consumers:
                await c.start()
            assert crasher.stdout is not None
            line = await asyncio.wait_for(crasher.stdout.readline(), 25)
            assert line.startswith(b"ASSIGNED")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 25
            # the two in-process members hold 4 of the 6 partitions: the third has 2
            while sum(len(c.assignment()) for c in consumers) != 4:
                assert loop.time() < deadline, [c.assignment() for c in consumers]
                await asyncio.sleep(0.05)
            crasher.send_signal(signal.SIGKILL)
            await crasher.wait()
            killed_at = loop.time()
            parts = await settle(consumers)
            assert sorted(len(p) for p in parts) == [3, 3]
            # evicted by the session timeout (2 s), not by a LeaveGroup
            assert loop.time() - killed_at >= 1.0
        finally:
            if crasher.returncode is None:
                crasher.kill()
                await crasher.wait()
            for c in consumers:
                await c.stop()

    asyncio.run(asyncio.wait_for(main(), 90))
