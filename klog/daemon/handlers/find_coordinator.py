"""FindCoordinator (v0-v6): which broker coordinates a group (or transactional id).

A group's coordinator (key type 0) is the leader of its ``__consumer_offsets`` partition
(``GroupMetadataManager.partition_for``), a transactional id's (key type 1) the leader of
its ``__transaction_state`` partition (``TransactionStateManager.partition_for``); the
topic is created on the first lookup. As in Kafka the answer is the leader as this
broker's metadata knows it, whether or not it has finished loading (the coordinator APIs
answer COORDINATOR_LOAD_IN_PROGRESS meanwhile). v0-v3 ask for one key; v4+ for a batch of
keys of one type, each answered on its own. Other key types (v6's share groups, unknown
ids) are INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any

from klog.daemon.group.metadata_manager import OFFSETS_TOPIC
from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.transaction.state_manager import TRANSACTION_STATE_TOPIC
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode

GROUP = 0
TRANSACTION = 1

# Kafka's Errors.message(): the exception's default text, "NONE" for no error (v0-v3 send
# it; klog's own words where no client reads them).
_MESSAGES = {
    ErrorCode.NONE: "NONE",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Not authorized to describe the group.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        "Not authorized to describe the transactional id.",
}


def _answer(key: str, error: ErrorCode, message: str | None = None,
            node: tuple[int, str, int] = (-1, "", -1)) -> dict[str, Any]:
    return {"key": key, "node_id": node[0], "host": node[1], "port": node[2],
            "error_code": int(error),
            "error_message": message if message is not None else _MESSAGES.get(error)}


_REFUSED = (int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
            int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
#: key type -> (the resource it names, the error when Describe on it is denied).
_DENIED = {0: (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
           1: (ResourceType.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}


async def _find(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    denied = _DENIED.get(key_type)
    if denied is not None and not ctx.authorize(AclOperation.DESCRIBE, denied[0], key):
        return _answer(key, denied[1])
    services = ctx.services
    cache = services.metadata_cache
    if key_type == GROUP:
        manager = services.group_manager
        if not cache.contains_topic(OFFSETS_TOPIC):
            await manager.ensure_topic()
        state = cache.partition_state(OFFSETS_TOPIC, manager.partition_for(key))
    elif key_type == TRANSACTION:
        txns = services.transaction_coordinator.state_manager
        if not cache.contains_topic(TRANSACTION_STATE_TOPIC):
            await txns.ensure_topic()
        state = cache.partition_state(TRANSACTION_STATE_TOPIC, txns.partition_for(key))
    else:
        return _answer(key, ErrorCode.INVALID_REQUEST, f"Unknown coordinator type: {key_type}")
    if state is None or state.leader < 0:
        return _answer(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    info = cache.broker(state.leader)
    endpoint = None if info is None else info.endpoint(ctx.listener_name)
    if endpoint is None:
        return _answer(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _answer(key, ErrorCode.NONE, node=(state.leader, endpoint.host, endpoint.port))


async def handle(ctx: RequestContext, request: Request) -> Response:
    if ctx.api_version >= 4:
        key_type = request.key_type
        coordinators = [await _find(ctx, key_type, key) for key in request.coordinator_keys]
        for c in coordinators:  # Kafka's batched answers leave a refusal's message unset
            if c["error_code"] in _REFUSED:
                c["error_message"] = None
        return ctx.respond({"throttle_time": 0, "coordinators": coordinators})
    answer = await _find(ctx, getattr(request, "key_type", GROUP), request.key)
    answer["throttle_time"] = 0
    return ctx.respond(answer)
