"""ElectLeaders (v0-2): move partitions' leadership to their preferred replica (election
type 0; v0 knows no other) or elect a leader for partitions without one (1, unclean).

Only the active controller elects (Controller.elect_leaders, klog/daemon/controller/
leader_balance.py); any other broker answers NOT_CONTROLLER for each partition named, as
Kafka's ZooKeeper-mode controller does, and -- beyond Kafka, so that an "all partitions"
request is not answered with a silent empty list -- in the top-level error (v1+) as well.
When the request names no partitions (null: all of them), partitions that needed no
election are left out of the answer (KafkaApis.handleElectLeaders).

The request's timeout bounds the wait, as Kafka's DelayedElectLeader does: an election the
controller has not finished by then (it may be busy with a large topic creation) goes on,
and the answer says REQUEST_TIMED_OUT for each partition named (for "all partitions", in
the top-level error, since which partitions it would elect is not known yet).
"""

from __future__ import annotations

import asyncio
from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    election_type = int(getattr(request, "election_type", 0))
    tps: list[tuple[str, int]] | None = None
    if request.topic_partitions is not None:
        tps = list(dict.fromkeys((t.topic, int(p)) for t in request.topic_partitions
                                 for p in t.partitions))
    controller = ctx.services.controller
    top = 0
    results: dict[tuple[str, int], tuple[int, str | None]]
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        top = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        results = {tp: (top, None) for tp in tps or []}
    elif not controller.active:
        top = int(ErrorCode.NOT_CONTROLLER) if tps is None else 0
        results = {tp: (int(ErrorCode.NOT_CONTROLLER), None) for tp in tps or []}
    elif election_type not in (0, 1):
        message = f"unknown election type {election_type}: 0 (preferred) or 1 (unclean)"
        top = int(ErrorCode.INVALID_REQUEST)
        results = {tp: (int(ErrorCode.INVALID_REQUEST), message) for tp in tps or []}
    else:
        election = asyncio.ensure_future(controller.elect_leaders(election_type, tps))
        timeout_s = max(as_millis(request.timeout), 0) / 1000
        try:
            # shield: a timed-out answer leaves the election itself running, as in Kafka.
            results = await asyncio.wait_for(asyncio.shield(election), timeout_s)
        except TimeoutError:
            message = f"the election did not complete within {as_millis(request.timeout)} ms"
            top = int(ErrorCode.REQUEST_TIMED_OUT) if tps is None else 0
            results = {tp: (int(ErrorCode.REQUEST_TIMED_OUT), message) for tp in tps or []}
            # Nobody awaits it now: retrieve its outcome so a failure is not reported as
            # "never retrieved" (the controller logs its own failures).
            election.add_done_callback(lambda f: f.cancelled() or f.exception())
        if tps is None:
            results = {tp: r for tp, r in results.items()
                       if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (code, error_message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_id": partition, "error_code": code, "error_message": error_message})
    return ctx.respond({
        "throttle_time": 0,
        "error_code": top,
        "replica_election_results": [{"topic": t, "partition_result": rows}
                                     for t, rows in by_topic.items()],
    })
