"""The controller's wire channel to the other brokers (Kafka's ControllerChannelManager).

Owns, per live remote broker, one connection (klog.client.network.BrokerConnection, to the
broker's endpoint on ``inter.broker.listener.name``) and a FIFO queue of control requests
(LeaderAndIsr, UpdateMetadata, StopReplica), sent one at a time in order by a task of its
own, as Kafka's RequestSendThread does. A request is built when it is sent, at the highest
version both sides speak (our known range, the broker's ApiVersions answer). A failed send
(connection refused, reset, timed out) reconnects after a backoff (RETRY_BACKOFF_S,
doubling while the broker stays unreachable, at most RETRY_BACKOFF_MAX_S) and resends the
same request, for as long as the broker is registered: its queue is dropped only when it
leaves /brokers/ids (``remove_broker``). The first failure is logged as a warning, the
delivery that ends a run of failures at info level.

The request builders here turn the controller's values (PartitionState, BrokerInfo) into
values for klog.protocol.inter_broker entities of any version: keys of other versions are
dropped by ``build``, so one mapping serves every version.

Used from the event loop only: the controller's task enqueues; each broker's sender task
sends. No locks.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from klog.client.errors import KafkaClientError
from klog.client.network import BrokerConnection, build_request
from klog.client.security import ClientSecurity
from klog.daemon.controller.receiver import EPOCH_DURING_DELETE, SECURITY_PROTOCOL_IDS
from klog.daemon.metadata_cache import BrokerInfo, PartitionState
from klog.daemon.tasks import stop_task
from klog.protocol import apis, inter_broker
from klog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Values = dict[str, Any]

#: Wait before reconnecting to a broker that failed a send (Kafka's RequestSendThread
#: pauses 100 ms after a failed connect or send) ...
RETRY_BACKOFF_S = 0.1
#: ... doubled at each further failure up to this (the reconnect backoff of Kafka's
#: NetworkClient grows to reconnect.backoff.max.ms, 1 s by default).
RETRY_BACKOFF_MAX_S = 1.0

_NAMES = {inter_broker.LEADER_AND_ISR: "LeaderAndIsr", inter_broker.STOP_REPLICA: "StopReplica",
          inter_broker.UPDATE_METADATA: "UpdateMetadata"}


@dataclass(slots=True)
class ControlRequest:
    """One queued request: ``values(version)`` gives the values to build it with."""

    api_key: int
    values: Callable[[int], Values]
    on_response: Callable[[int, Any], None] | None = None


class _BrokerSender:
    """The queue and sending task of one remote broker."""

    def __init__(self, manager: ControllerChannelManager, info: BrokerInfo,
                 host: str, port: int) -> None:
        self.manager = manager
        self.info = info
        self.broker_id = info.broker_id
        self.address = (host, port)
        self.queue: collections.deque[ControlRequest] = collections.deque()
        self._wakeup = asyncio.Event()
        self._conn: BrokerConnection | None = None
        self._failures = 0
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-to-broker-{self.broker_id}")

    def enqueue(self, request: ControlRequest) -> None:
        self.queue.append(request)
        self._wakeup.set()

    async def _connection(self) -> BrokerConnection:
        conn = self._conn
        if conn is None or conn.closed:
            conn = BrokerConnection(self.broker_id, *self.address,
                                    client_id=f"controller-{self.manager.controller_id}",
                                    max_in_flight=1, security=self.manager.security)
            await conn.connect(self.manager.timeout_s)
            self._conn = conn
        return conn

    async def _run(self) -> None:
        while True:
            if not self.queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            request = self.queue[0]
            name = _NAMES.get(request.api_key, str(request.api_key))
            try:
                conn = await self._connection()
                version = _pick_version(conn, request.api_key)
                if version is None:
                    log.error("broker %d does not speak %s: request dropped", self.broker_id,
                              name)
                    self.queue.popleft()
                    continue
                entity = build_request(
                    apis.spec_for(request.api_key).request_entity(version),
                    request.values(version))
                response = await conn.request(request.api_key, version, entity,
                                              timeout=self.manager.timeout_s)
            except asyncio.CancelledError:
                raise
            except (KafkaClientError, OSError) as exc:
                self._failures += 1
                # The first failure is news; repeats while a broker is down are not.
                (log.warning if self._failures == 1 else log.debug)(
                    "sending %s to broker %d at %s:%d failed (%s); retrying", name,
                    self.broker_id, *self.address, exc)
                self._close_connection()
                await asyncio.sleep(retry_backoff(self._failures))
                continue
            except Exception:
                log.exception("cannot send %s to broker %d: request dropped", name,
                              self.broker_id)
                self.queue.popleft()
                continue
            if self._failures:
                log.info("sent %s to broker %d at %s:%d after %d failed attempts", name,
                         self.broker_id, *self.address, self._failures)
                self._failures = 0
            self.queue.popleft()
            _log_errors(self.broker_id, name, response)
            if request.on_response is not None:
                try:
                    request.on_response(self.broker_id, response)
                except Exception:
                    log.exception("handling the %s response of broker %d failed", name,
                                  self.broker_id)

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def close(self) -> None:
        await stop_task(self.task, what=f"the controller's sender to broker {self.broker_id}")
        self._close_connection()


def retry_backoff(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (1: the first)."""
    doublings: int = min(max(failures - 1, 0), 16)
    return min(RETRY_BACKOFF_S * (1 << doublings), RETRY_BACKOFF_MAX_S)


def _pick_version(conn: BrokerConnection, api_key: int) -> int | None:
    spec = apis.spec_for(api_key)
    theirs = conn.api_versions.get(api_key)
    if theirs is None:
        return None
    lo, hi = max(spec.min_version, theirs[0]), min(spec.max_version, theirs[1])
    return hi if lo <= hi else None


def _log_errors(broker_id: int, name: str, response: Any) -> None:
    code = int(getattr(response, "error_code", 0))
    if code:
        log.warning("broker %d answered %s with %s", broker_id, name, _error_name(code))
    partitions = list(getattr(response, "partition_errors", ()))
    for topic in getattr(response, "topics", ()):
        partitions += topic.partition_errors
    for p in partitions:
        perr = int(p.error_code)
        # STALE_CONTROLLER_EPOCH per partition = "already at that leader epoch": routine.
        if perr and perr != ErrorCode.STALE_CONTROLLER_EPOCH and not code:
            log.warning("broker %d answered %s for %s-%d with %s", broker_id, name,
                        getattr(p, "topic_name", "?"), int(p.partition_index),
                        _error_name(perr))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ControllerChannelManager:
    """Senders to the live remote brokers of the active controller."""

    def __init__(self, controller_id: int, listener_name: str, timeout_ms: int,
                 security: ClientSecurity | None = None) -> None:
        self.controller_id = controller_id
        self.listener_name = listener_name
        #: The inter-broker listener's TLS and SASL (None: PLAINTEXT).
        self.security = security
        self.timeout_s = max(timeout_ms, 100) / 1000
        self._senders: dict[int, _BrokerSender] = {}

    def brokers(self) -> list[int]:
        return sorted(self._senders)

    def add_broker(self, info: BrokerInfo) -> None:
        """Start a sender for ``info`` (replacing one for an older registration whose
        address differs; a re-registered broker at the same address keeps its sender)."""
        endpoint = info.endpoint(self.listener_name) or (
            info.endpoints[0] if info.endpoints else None)
        if endpoint is None:
            log.error("broker %d registered no endpoint: the controller cannot reach it",
                      info.broker_id)
            return
        current = self._senders.get(info.broker_id)
        if current is not None:
            if current.address == (endpoint.host, endpoint.port):
                current.info = info
                return
            self._remove(info.broker_id)
        self._senders[info.broker_id] = _BrokerSender(self, info, endpoint.host or "127.0.0.1",
                                                      endpoint.port)

    def remove_broker(self, broker_id: int) -> None:
        self._remove(broker_id)

    def _remove(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            asyncio.get_running_loop().create_task(sender.close())

    def send(self, broker_id: int, request: ControlRequest) -> bool:
        sender = self._senders.get(broker_id)
        if sender is None:
            return False
        sender.enqueue(request)
        return True

    def pending(self, broker_id: int) -> int:
        sender = self._senders.get(broker_id)
        return len(sender.queue) if sender is not None else 0

    async def close(self) -> None:
        senders = list(self._senders.values())
        self._senders.clear()
        for sender in senders:
            await sender.close()


# -- request values ------------------------------------------------------------------------


def leader_and_isr_values(controller_id: int, controller_epoch: int, broker_epoch: int,
                          states: Iterable[PartitionState], topic_ids: dict[str, uuid.UUID],
                          leaders: Iterable[BrokerInfo], listener_name: str) -> Values:
    flat, topic_states = _partition_states(states, topic_ids, lambda s: {
        "adding_replicas": list(s.adding_replicas),
        "removing_replicas": list(s.removing_replicas), "is_new": False,
        "leader_recovery_state": 0,
    })
    live_leaders = []
    for info in leaders:
        ep = info.endpoint(listener_name) or (info.endpoints[0] if info.endpoints else None)
        if ep is not None:
            live_leaders.append({"broker_id": info.broker_id, "host_name": ep.host,
                                 "port": ep.port})
    return {
        "controller_id": controller_id, "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch, "type": 0,
        "ungrouped_partition_states": flat,
        "topic_states": topic_states,
        "live_leaders": live_leaders,
    }


def update_metadata_values(controller_id: int, controller_epoch: int, broker_epoch: int,
                           brokers: Iterable[BrokerInfo], states: Iterable[PartitionState],
                           topic_ids: dict[str, uuid.UUID]) -> Values:
    flat, topic_states = _partition_states(
        states, topic_ids, lambda s: {"offline_replicas": list(s.offline_replicas)})
    live = []
    for info in brokers:
        plaintext = next((e for e in info.endpoints if e.security_protocol == "PLAINTEXT"),
                         info.endpoints[0] if info.endpoints else None)
        live.append({
            "id": info.broker_id,
            "v0_host": plaintext.host if plaintext else "",
            "v0_port": plaintext.port if plaintext else -1,
            "endpoints": [{"port": e.port, "host": e.host, "listener": e.listener_name,
                           "security_protocol": SECURITY_PROTOCOL_IDS.get(
                               e.security_protocol, 0)} for e in info.endpoints],
            "rack": info.rack,
        })
    return {
        "controller_id": controller_id, "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch, "ungrouped_partition_states": flat,
        "topic_states": topic_states,
        "live_brokers": live,
    }


def _partition_states(states: Iterable[PartitionState], topic_ids: dict[str, uuid.UUID],
                      extra: Callable[[PartitionState], Values]
                      ) -> tuple[list[Values], list[Values]]:
    """The partition states of a LeaderAndIsr or UpdateMetadata: the fields both carry,
    with ``extra``'s, as the ungrouped list (v0-v4) and grouped by topic (v5+)."""
    by_topic: dict[str, list[Values]] = {}
    flat: list[Values] = []
    for s in states:
        values = {
            "topic_name": s.topic, "partition_index": s.partition,
            "controller_epoch": s.controller_epoch, "leader": s.leader,
            "leader_epoch": s.leader_epoch, "isr": list(s.isr), "zk_version": s.zk_version,
            "replicas": list(s.replicas), **extra(s),
        }
        flat.append(values)
        by_topic.setdefault(s.topic, []).append(values)
    return flat, [{"topic_name": t, "topic_id": topic_ids.get(t), "partition_states": parts}
                  for t, parts in by_topic.items()]


def stop_replica_values(controller_id: int, controller_epoch: int, broker_epoch: int,
                        partitions: Iterable[tuple[TopicPartition, int]],
                        delete: bool) -> Values:
    """``partitions``: (tp, leader epoch); a deletion sends Kafka's EpochDuringDelete."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), leader_epoch in partitions:
        by_topic.setdefault(topic, []).append((partition, leader_epoch))
    return {
        "controller_id": controller_id, "controller_epoch": controller_epoch,
        "broker_epoch": broker_epoch, "delete_partitions": delete,
        "ungrouped_partitions": [{"topic_name": t, "partition_index": p}
                                 for t, parts in by_topic.items() for p, _ in parts],
        "topics": [{"name": t, "partition_indexes": [p for p, _ in parts]}
                   for t, parts in by_topic.items()],
        "topic_states": [{"topic_name": t, "partition_states": [
            {"partition_index": p, "delete_partition": delete,
             "leader_epoch": EPOCH_DURING_DELETE if delete else epoch}
            for p, epoch in parts]} for t, parts in by_topic.items()],
    }
