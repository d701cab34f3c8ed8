"""klog/daemon/controller/log_dir_events.py: a broker's failed log dir, as the controller
handles it -- the notification read and deleted, the broker asked (LeaderAndIsr), its
KAFKA_STORAGE_ERROR answers taken as replicas on an offline dir: leadership moves to
another in-sync replica, the replica leaves the ISR, and no election picks it again until
its broker registers anew."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from klog.daemon.controller.controller import Controller
from klog.daemon.controller.log_dir_events import response_errors
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import NodeExistsError
from klog.daemon.metastore.local import LocalMetadataStore
from klog.protocol.errors import ErrorCode
from tests.daemon.controller.fakes import controller_for

STORAGE = int(ErrorCode.KAFKA_STORAGE_ERROR)


def _controller(store: LocalMetadataStore) -> tuple[Controller, list[Any]]:
    broker = SimpleNamespace(broker_id=9, metastore=store,
                             config=SimpleNamespace(unclean_leader_election_enable=False))
    c = controller_for(broker)
    c.epoch = 3
    c.live_brokers = {b: None for b in (1, 2, 3)}  # type: ignore[misc]
    sent: list[Any] = []
    c._send = lambda states, update_all=False: sent.append(("send", list(states)))  # type: ignore[method-assign]
    c._send_leader_and_isr = lambda b, states: sent.append(("lai", b, list(states)))  # type: ignore[method-assign]
    c._send_update_metadata = lambda states, brokers=None: sent.append(("um", list(states)))  # type: ignore[method-assign]
    for p, leader in ((0, 1), (1, 2)):
        c.topics.setdefault("t", paths.TopicAssignment({}))
        c.topics["t"].partitions[p] = paths.ReplicaAssignment((1, 2, 3))
        path = paths.partition_state_path("t", p)
        store.ensure_path(paths.partition_path("t", p))
        data = paths.LeaderIsrAndControllerEpoch(leader=leader, leader_epoch=5, isr=(1, 2, 3),
                                                 controller_epoch=3).encode()
        try:
            store.create(path, data)
        except NodeExistsError:
            store.set(path, data)
        _, stat = store.get(path)
        c.states[("t", p)] = PartitionState("t", p, leader, 5, (1, 2, 3), (1, 2, 3), 3,
                                            stat.version)
    return c, sent


def _state(store: LocalMetadataStore, p: int) -> paths.LeaderIsrAndControllerEpoch:
    data, _ = store.get(paths.partition_state_path("t", p))
    return paths.LeaderIsrAndControllerEpoch.decode(data)


def test_storage_errors_move_leadership_and_isr_off_the_replica(
        store: LocalMetadataStore) -> None:
    c, sent = _controller(store)
    # Broker 1 answers: t-0 (which it leads) and t-1 (which it follows) are on a failed dir.
    asyncio.run(c.log_dirs.process_response(1, {("t", 0): STORAGE, ("t", 1): STORAGE}))
    assert c.log_dirs.offline == {1: {("t", 0), ("t", 1)}}
    led = _state(store, 0)
    assert (led.leader, led.leader_epoch, led.isr) == (2, 6, (2, 3))
    followed = _state(store, 1)
    assert (followed.leader, followed.leader_epoch, followed.isr) == (2, 6, (2, 3))
    assert sent and sent[-1][0] == "send"
    # No election picks the offline replica while its broker lives on, preferred or not.
    assert not c._replica_online(1, ("t", 0)) and c._replica_online(2, ("t", 0))
    assert c._choose_leader((1, 2, 3), (1, 2, 3), False, ("t", 0)) == (2, (2, 3))
    # The same answer again changes nothing; an online answer brings the replica back
    # (as does the broker registering anew).
    asyncio.run(c.log_dirs.process_response(1, {("t", 0): STORAGE, ("t", 1): 0}))
    assert c.log_dirs.offline == {1: {("t", 0)}} and _state(store, 0).leader_epoch == 6
    c.log_dirs.broker_changed([1])
    assert c._replica_online(1, ("t", 0))


def test_the_notification_is_read_deleted_and_the_broker_asked(
        store: LocalMetadataStore) -> None:
    c, sent = _controller(store)
    store.create(paths.log_dir_event_path(), paths.LogDirEventNotification(1).encode(),
                 sequential=True, make_parents=True)
    store.create(paths.log_dir_event_path(), paths.LogDirEventNotification(7).encode(),
                 sequential=True, make_parents=True)  # not a live broker: nobody asked

    async def go() -> None:
        c._loop = asyncio.get_running_loop()
        await c.log_dirs.on_notification()

    asyncio.run(go())
    assert store.get_children(paths.LOG_DIR_EVENT_NOTIFICATION) == []
    (asked,) = [s for s in sent if s[0] == "lai"]
    assert asked[1] == 1 and {(s.topic, s.partition) for s in asked[2]} == {("t", 0), ("t", 1)}


def test_response_errors_of_every_version() -> None:
    tid = uuid.uuid4()
    old = SimpleNamespace(error_code=0, partition_errors=[
        SimpleNamespace(topic_name="t", partition_index=0, error_code=STORAGE)])
    assert response_errors(old, {}) == {("t", 0): STORAGE}
    new = SimpleNamespace(error_code=0, topics=[SimpleNamespace(topic_id=tid, partition_errors=[
        SimpleNamespace(partition_index=1, error_code=0)])])
    assert response_errors(new, {tid: "t"}) == {("t", 1): 0}
    refused = SimpleNamespace(error_code=int(ErrorCode.STALE_CONTROLLER_EPOCH),
                              partition_errors=[])
    assert response_errors(refused, {}) == {}
