"""Client quotas on a 2-broker ZooKeeper cluster: a quota altered through one broker
reaches the other through /config/changes (users/..., clients/... notifications), which
then throttles the client's produce; removing it there frees the client again."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.conftest import Cluster
from tests.daemon.wire import WireClient, batch, produce_values

pytestmark = pytest.mark.timeout(180)


def _throttle_ms(c: Cluster, broker_id: int, topic: str) -> int | None:
    """One produce of ~10 KB as client id "cq" to ``broker_id`` on a fresh connection (a
    throttled one would hold the next request): the throttle time it was answered with
    (None: not appended, e.g. the leader has not heard of its leadership yet)."""
    port = c.broker(broker_id).port
    with WireClient(("127.0.0.1", port)) as client:
        _cid, frame = client.request_frame(0, 9, produce_values(topic, 0, batch(
            1, b"z" * 10_000)), client_id="cq")
        client.send_raw(frame)
        _got, response = client.recv_response(0, 9)
    if response.responses[0].partition_responses[0].error_code != 0:
        return None
    return int(response.throttle_time.total_seconds() * 1000)


def test_a_quota_altered_on_one_broker_throttles_on_the_other(cluster: Any) -> None:
    c: Cluster = cluster(brokers=2)
    c.create_topic("cq", partitions=1, replication_factor=1)
    leader = c.leader("cq", 0)
    other = next(i for i in c.ids if i != leader)
    c.wait(lambda: _throttle_ms(c, leader, "cq") == 0, what="the leader takes produces")

    def alter(ops: dict[str, float | None]) -> None:
        async def run(admin: Any) -> None:
            assert await admin.alter_client_quotas([({"client-id": "cq"}, ops)]) == [None]
        c._admin(other, run)

    alter({"producer_byte_rate": 100.0})  # through the broker that does not lead
    c.wait(lambda: (_throttle_ms(c, leader, "cq") or 0) > 0, what="the quota reached the leader")
    alter({"producer_byte_rate": None})
    c.wait(lambda: _throttle_ms(c, leader, "cq") == 0, what="the removal reached the leader")

    # a user/client-id pair entity: users/ANONYMOUS/clients/cq
    async def pair(admin: Any) -> None:
        assert await admin.alter_client_quotas(
            [({"user": "ANONYMOUS", "client-id": "cq"}, {"producer_byte_rate": 100.0})]) == [None]
    c._admin(other, pair)
    c.wait(lambda: (_throttle_ms(c, leader, "cq") or 0) > 0, what="the user/client quota arrived")
