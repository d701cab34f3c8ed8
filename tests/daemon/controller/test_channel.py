"""The controller's channel (klog/daemon/controller/channel.py) against a real broker
process: a request for a broker that cannot be reached waits in its queue and is sent once
the broker listens; requests to one broker arrive in order; a removed broker's queue goes.

The broker runs in cluster mode (a standalone one accepts no control request from the
wire), on a ZooKeeper chroot whose /controller names this test's controller, id 7."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from klog.client.admin import AdminClient
from klog.daemon.controller.channel import (
    ControllerChannelManager,
    ControlRequest,
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


def test_queued_until_the_broker_listens_then_delivered_in_order(
        tmp_path: Path, zk_server: ZooKeeperServer) -> None:  # noqa: F811 - the fixture
    port = free_port()
    info = BrokerInfo(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),))
    answers: list[tuple[str, int]] = []
    connect = f"{zk_server.connect}/channel-{uuid.uuid4().hex[:12]}"
    # This test is the controller ZooKeeper names: /controller (held by this session)
    # and /controller_epoch, as an election writes them.
    zk = ZooKeeperMetadataStore(connect, session_timeout_ms=10000,
                                connection_timeout_ms=10000)
    zk.start()
    zk.create(paths.CONTROLLER_EPOCH, str(CONTROLLER_EPOCH).encode())
    zk.create(paths.CONTROLLER, paths.ControllerRegistration(CONTROLLER_ID, 0).encode(),
              ephemeral=True)

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
