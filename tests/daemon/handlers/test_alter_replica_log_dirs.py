"""The AlterReplicaLogDirs handler with a fake mover, no socket: decode (v0-v2, a
partition named twice goes to the last dir), one call, the results grouped by topic; Alter
on the cluster needed when an authorizer is set."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from klog.daemon.handlers.alter_replica_log_dirs import handle
from klog.daemon.security.authorizer import AclAuthorizer
from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from klog.protocol import apis
from klog.protocol.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

API = 34


class FakeMover:
    def __init__(self) -> None:
        self.asked: list[dict[tuple[str, int], str]] = []

    async def alter_replica_log_dirs(self, dirs: dict[tuple[str, int], str]
                                     ) -> dict[tuple[str, int], ErrorCode]:
        self.asked.append(dict(dirs))
        return {tp: ErrorCode.NONE if tp[1] == 0 else ErrorCode.REPLICA_NOT_AVAILABLE
                for tp in dirs}


@dataclass
class Conn:
    principal: KafkaPrincipal = ANONYMOUS
    peer: str = "127.0.0.1:5555"
    listener_name: str = "PLAINTEXT"

    def close(self) -> None:
        pass


def _request(version: int) -> Any:
    values = {"dirs": [
        {"path": "/data/a", "topics": [{"name": "t", "partitions": [0, 1]}]},
        {"path": "/data/b", "topics": [{"name": "t", "partitions": [1]},
                                       {"name": "u", "partitions": [0]}]}]}
    entity = build(apis.spec_for(API).request_entity(version), values)
    return apis.decode_request(API, version, apis.encode_request(entity))


def _results(response: Any) -> dict[tuple[str, int], int]:
    return {(t.topic_name, p.partition_index): p.error_code
            for t in response.results for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_one_call_results_by_topic(version: int) -> None:
    mover = FakeMover()
    ctx = context(RequestHeader(API, version, 1, "test", 1), log_dir_mover=mover)
    response = asyncio.run(handle(ctx, _request(version)))
    assert mover.asked == [{("t", 0): "/data/a", ("t", 1): "/data/b", ("u", 0): "/data/b"}]
    assert _results(response) == {("t", 0): 0, ("t", 1): ErrorCode.REPLICA_NOT_AVAILABLE,
                                  ("u", 0): 0}
    assert sorted(t.topic_name for t in response.results) == ["t", "u"]


def test_alter_on_the_cluster_is_needed() -> None:
    mover = FakeMover()
    denied = AclAuthorizer(None)
    ctx = context(RequestHeader(API, 2, 1, "test", 1), Conn(), log_dir_mover=mover,
                  authorizer=denied)
    response = asyncio.run(handle(ctx, _request(2)))
    assert set(_results(response).values()) == {ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
    assert mover.asked == []
    allowed = AclAuthorizer(None)
    asyncio.run(allowed.create_acls([AclBinding(
        ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
        AccessControlEntry("User:ANONYMOUS", "*", AclOperation.ALTER,
                           AclPermissionType.ALLOW))]))
    ctx = context(RequestHeader(API, 2, 1, "test", 1), Conn(), log_dir_mover=mover,
                  authorizer=allowed)
    assert _results(asyncio.run(handle(ctx, _request(2))))[("t", 0)] == 0
