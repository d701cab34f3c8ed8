"""The controller's channel (klog/daemon/controller/channel.py) against a real broker
process: a request for a broker that cannot be reached waits in its queue and is sent once
the broker listens; requests to one broker arrive in order; a removed broker's queue goes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from klog.client.admin import AdminClient
from klog.daemon.controller.channel import (
    ControllerChannelManager,
    ControlRequest,
    update_metadata_values,
)
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, PartitionState
from klog.protocol import inter_broker
from klog.testing import KlogBroker, free_port


def test_queued_until_the_broker_listens_then_delivered_in_order(tmp_path: Path) -> None:
    port = free_port()
    info = BrokerInfo(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", port),))
    answers: list[tuple[str, int]] = []

    def request(topic: str, controller_epoch: int) -> ControlRequest:
        # A controller epoch far above the standalone broker's own: obeyed.
        values = update_metadata_values(
            7, controller_epoch, -1, [info],
            [PartitionState(topic, 0, 1, 0, (1,), (1,), controller_epoch)], {})
        return ControlRequest(inter_broker.UPDATE_METADATA, lambda version: values,
                              lambda broker_id, r: answers.append((topic, int(r.error_code))))

    async def scenario() -> Any:
        manager = ControllerChannelManager(7, "PLAINTEXT", 2000)
        manager.add_broker(info)
        assert manager.send(1, request("ghost-a", 1000))
        assert manager.send(1, request("ghost-b", 1001))
        # An older epoch after a newer one: the broker refuses it (STALE_CONTROLLER_EPOCH).
        assert manager.send(1, request("ghost-c", 999))
        await asyncio.sleep(1.0)
        assert manager.pending(1) == 3 and answers == []
        broker = KlogBroker(tmp_path / "b", port=port)
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
            assert not manager.send(2, request("x", 1002))
            manager.remove_broker(1)
            assert manager.pending(1) == 0 and not manager.send(1, request("y", 1003))
            await manager.close()
            return topics
        finally:
            await asyncio.to_thread(broker.stop)

    topics = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert answers == [("ghost-a", 0), ("ghost-b", 0), ("ghost-c", 11)]
    assert "ghost-a" in topics and "ghost-b" in topics and "ghost-c" not in topics
