"""The controller's channel (klog/daemon/controller/channel.py) against a real broker
process: a request for a broker that cannot be reached waits in its queue and is sent once
the broker listens; requests to one broker arrive in order; a removed broker's queue goes;
a broker that refuses, then listens without answering, then serves gets every request,
with the retries backing off.

The broker runs in cluster mode (a standalone one accepts no control request from the
wire), on a ZooKeeper chroot whose /controller names this test's controller, id 7."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from pathlib import Path
from typing import Any

from klog.client.admin import AdminClient
from klog.daemon.controller.channel import (
    RETRY_BACKOFF_MAX_S,
    ControllerChannelManager,
    ControlRequest,
    retry_backoff,
    update_metadata_values,
)
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
from klog.protocol import inter_broker
from klog.testing import KlogBroker, free_port
from tests.zkserver import ZooKeeperServer, zk_server  # noqa: F401 - the fixture

CONTROLLER_ID = 7
CONTROLLER_EPOCH = 1000


def _controller_zk(connect: str) -> ZooKeeperMetadataStore:
    """The test as the controller ZooKeeper names: /controller (held by this session) and
    /controller_epoch, as an election writes them."""
    zk = ZooKeeperMetadataStore(connect, session_timeout_ms=10000,
                                connection_timeout_ms=10000)
    zk.start()
    zk.create(paths.CONTROLLER_EPOCH, str(CONTROLLER_EPOCH).encode())
    zk.create(paths.CONTROLLER, paths.ControllerRegistration(CONTROLLER_ID, 0).encode(),
              ephemeral=True)
    return zk


def test_queued_until_the_broker_listens_then_delivered_in_order(
        tmp_path: Path, zk_server: ZooKeeperServer) -> None:  # noqa: F811 - the fixture
    port = free_port()
    info = BrokerInfo(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),))
    answers: list[tuple[str, int]] = []
    connect = f"{zk_server.connect}/channel-{uuid.uuid4().hex[:12]}"
    zk = _controller_zk(connect)

    def request(topic: str, controller_epoch: int) -> ControlRequest:
        values = update_metadata_values(
            CONTROLLER_ID, controller_epoch, -1, [info],
            [PartitionState(topic, 0, 1, 0, (1,), (1,), controller_epoch)], {})
        return ControlRequest(inter_broker.UPDATE_METADATA, lambda version: values,
                              lambda broker_id, r: answers.append((topic, int(r.error_code))))

    async def scenario() -> Any:
        manager = ControllerChannelManager(CONTROLLER_ID, "PLAINTEXT", 2000)
        manager.add_broker(info)
        assert manager.send(1, request("ghost-a", CONTROLLER_EPOCH))
        assert manager.send(1, request("ghost-b", CONTROLLER_EPOCH))
        # An older epoch: a deposed controller's, refused (STALE_CONTROLLER_EPOCH).
        assert manager.send(1, request("ghost-c", CONTROLLER_EPOCH - 1))
        await asyncio.sleep(1.0)
        assert manager.pending(1) == 3 and answers == []
        broker = KlogBroker(tmp_path / "b", port=port, overrides={
            "zookeeper.connect": connect, "broker.id": 1,
            "offsets.topic.replication.factor": 1})
        await asyncio.to_thread(broker.start)
        try:
            for _ in range(200):
                if manager.pending(1) == 0:
                    break
                await asyncio.sleep(0.05)
            assert manager.pending(1) == 0
            async with AdminClient(broker.bootstrap_servers) as admin:
                topics = await admin.list_topics()
            # Unknown brokers are not the removed broker's business: gone with it.
            assert not manager.send(2, request("x", CONTROLLER_EPOCH))
            manager.remove_broker(1)
            assert manager.pending(1) == 0 and not manager.send(1, request("y",
                                                                            CONTROLLER_EPOCH))
            await manager.close()
            return topics
        finally:
            await asyncio.to_thread(broker.stop)

    try:
        topics = asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        zk.close()
    assert answers == [("ghost-a", 0), ("ghost-b", 0), ("ghost-c", 11)]
    assert "ghost-a" in topics and "ghost-b" in topics and "ghost-c" not in topics


def test_retry_backoff_doubles_up_to_its_cap() -> None:
    assert [retry_backoff(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert retry_backoff(1000) == RETRY_BACKOFF_MAX_S


def test_a_broker_that_listens_late_gets_every_request(
        tmp_path: Path, zk_server: ZooKeeperServer,  # noqa: F811 - the fixture
        caplog: Any) -> None:
    # A registered broker the controller cannot reach yet: its port bound but not
    # listening (refused), then listening but not answering (a broker still starting:
    # the connect succeeds, the requests wait unanswered past the timeout), then a broker
    # that serves. The queue waits through all of it and is delivered, in order, once
    # the broker answers.
    caplog.set_level(logging.INFO, logger="klog.daemon.controller.channel")
    port = free_port()
    info = BrokerInfo(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),))
    answers: list[str] = []
    connect = f"{zk_server.connect}/channel-{uuid.uuid4().hex[:12]}"
    zk = _controller_zk(connect)

    def request(topic: str) -> ControlRequest:
        values = update_metadata_values(
            CONTROLLER_ID, CONTROLLER_EPOCH, -1, [info],
            [PartitionState(topic, 0, 1, 0, (1,), (1,), CONTROLLER_EPOCH)], {})
        return ControlRequest(inter_broker.UPDATE_METADATA, lambda version: values,
                              lambda broker_id, r: answers.append(topic))

    async def scenario() -> None:
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        manager = ControllerChannelManager(CONTROLLER_ID, "PLAINTEXT", 1000)
        try:
            manager.add_broker(info)
            assert manager.send(1, request("late-a"))
            assert manager.send(1, request("late-b"))
            await asyncio.sleep(1.0)  # refused: bound, not listening
            assert manager.pending(1) == 2
            holder.listen(8)
            await asyncio.sleep(2.5)  # connects, never answered: times out
            assert manager.pending(1) == 2 and answers == []
        finally:
            holder.close()
        broker = KlogBroker(tmp_path / "b", port=port, overrides={
            "zookeeper.connect": connect, "broker.id": 1,
            "offsets.topic.replication.factor": 1})
        await asyncio.to_thread(broker.start)
        try:
            for _ in range(200):
                if manager.pending(1) == 0:
                    break
                await asyncio.sleep(0.05)
            assert manager.pending(1) == 0
        finally:
            await manager.close()
            await asyncio.to_thread(broker.stop)

    try:
        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        zk.close()
    assert answers == ["late-a", "late-b"]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("sending UpdateMetadata to broker 1" in m for m in messages) == 1  # once
    assert any("sent UpdateMetadata to broker 1" in m and "failed attempts" in m
               for m in messages), messages
