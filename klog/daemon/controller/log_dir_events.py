"""The controller's side of a failed log dir (Kafka's LogDirEventNotification handling and
replicasOnOfflineDirs).

Owns which replicas are on an offline log dir of their broker. A broker whose log dir fails
writes ``/log_dir_event_notification/log_dir_event_<seq>`` (klog/daemon/log_dir_failure.py);
the controller (``on_notification``) deletes the notifications and sends each named broker
a LeaderAndIsr with every partition it holds a replica of. Every LeaderAndIsr answer --
these, and all the others the controller sends (``on_leader_and_isr_response``) -- says
per partition whether the replica is online (NONE) or on an offline dir
(KAFKA_STORAGE_ERROR), as in Kafka's processLeaderAndIsrResponseReceived. Replicas that go
offline are handled as Kafka's onReplicasBecomeOffline: a partition they led gets a new
leader among its other in-sync replicas (none in sync: no leader, unless unclean election
is enabled for the topic), and the replica leaves the ISRs it was in. The controller never
elects a replica on an offline dir (``is_online``; used by every election), until its
broker restarts or leaves the cluster (``broker_changed``), as Kafka forgets
replicasOnOfflineDirs of brokers that start up or fail.

Part of the controller: called from its event task only (events "log_dir_event" and
"leader_and_isr_response").
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import NoNodeError
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.controller.context import ControllerContext

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_STORAGE_ERROR = int(ErrorCode.KAFKA_STORAGE_ERROR)


class LogDirEvents:
    """See the module docstring."""

    def __init__(self, controller: ControllerContext) -> None:
        self.controller = controller
        # broker id -> its replicas on offline log dirs (Kafka's replicasOnOfflineDirs)
        self.offline: dict[int, set[TopicPartition]] = {}

    def is_online(self, broker_id: int, tp: TopicPartition) -> bool:
        """Not on an offline log dir of its broker (as far as the answers tell)."""
        gone = self.offline.get(broker_id)
        return not gone or tp not in gone

    def offline_replicas(self, tp: TopicPartition, replicas: Iterable[int]) -> tuple[int, ...]:
        return tuple(r for r in replicas if not self.is_online(r, tp))

    def broker_changed(self, brokers: Iterable[int]) -> None:
        """These brokers left or registered anew: what their dirs were is forgotten."""
        for broker_id in brokers:
            self.offline.pop(broker_id, None)

    def on_resign(self) -> None:
        self.offline.clear()

    # -- the notification ------------------------------------------------------------------

    async def on_notification(self) -> None:
        """Read and delete the notifications; ask each broker named about its replicas."""
        c = self.controller
        watch = c._watcher("log_dir_event")
        try:
            names = await c._call(c.store.get_children, paths.LOG_DIR_EVENT_NOTIFICATION,
                                  watch)
        except NoNodeError:
            await c._call(c.store.ensure_path, paths.LOG_DIR_EVENT_NOTIFICATION)
            names = await c._call(c.store.get_children, paths.LOG_DIR_EVENT_NOTIFICATION,
                                  watch)
        if not names:
            return
        brokers = await c._call(self._take, sorted(names))
        for broker_id in sorted(brokers):
            if broker_id not in c.live_brokers:
                continue
            mine = [s for s in c.states.values() if broker_id in s.replicas]
            log.info("broker %d reported a failed log dir: asking it about its %d replicas",
                     broker_id, len(mine))
            if mine:
                c._send_leader_and_isr(broker_id, mine)

    def _take(self, names: list[str]) -> set[int]:
        c = self.controller
        brokers: set[int] = set()
        for name in names:
            path = f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}"
            try:
                data, _ = c.store.get(path)
                event = paths.LogDirEventNotification.decode(data)
                if event.event == paths.LOG_DIR_FAILURE_EVENT:
                    brokers.add(event.broker_id)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("ignoring %s: %s", path, exc)
            with contextlib.suppress(NoNodeError):
                c.store.delete(path)
        return brokers

    # -- the answers -----------------------------------------------------------------------

    def on_leader_and_isr_response(self, broker_id: int, response: Any) -> None:
        """A LeaderAndIsr answer over the channel (its sender task): queued for the
        controller's task, the per-partition errors by topic name."""
        c = self.controller
        names = {a.topic_id: t for t, a in c.topics.items() if a.topic_id is not None}
        errors = response_errors(response, names)
        if c._loop is not None and (broker_id in self.offline or any(
                e == _STORAGE_ERROR for e in errors.values())):
            c._queue.put_nowait(("leader_and_isr_response", (broker_id, errors)))

    async def process_response(self, broker_id: int,
                               errors: Mapping[TopicPartition, int]) -> None:
        """Kafka's processLeaderAndIsrResponseReceived: the broker's replicas on offline
        dirs now; those newly offline are handled as onReplicasBecomeOffline."""
        if not errors:
            return
        offline = {tp for tp, e in errors.items() if e == _STORAGE_ERROR}
        online = {tp for tp, e in errors.items() if e == 0}
        before = self.offline.get(broker_id, set())
        now = (before - online) | offline
        if now:
            self.offline[broker_id] = now
        else:
            self.offline.pop(broker_id, None)
        new = now - before
        if new:
            log.info("Mark replicas %s on broker %d as offline",
                     ",".join(f"{t}-{p}" for t, p in sorted(new)), broker_id)
            await self._replicas_offline(broker_id, new)

    async def _replicas_offline(self, broker_id: int, tps: set[TopicPartition]) -> None:
        c = self.controller
        led = sorted(tp for tp in tps if tp in c.states and c.states[tp].leader == broker_id)
        changed = await c._elect_leaders(led) if led else []
        done = {(s.topic, s.partition) for s in changed}
        shrink: list[PartitionState] = []
        for tp in sorted(tps - done):
            s = c.states.get(tp)
            if s is None or s.leader < 0 or s.leader == broker_id:
                continue
            isr = tuple(r for r in s.isr if r != broker_id)
            if isr != s.isr and isr:
                shrink.append(_replace(s, isr=isr, leader_epoch=s.leader_epoch + 1,
                                       controller_epoch=c.epoch))
        if shrink:
            await c._call(c._update_states, shrink)
            changed += [c.states[(s.topic, s.partition)] for s in shrink]
        if changed:
            log.info("moved leadership and ISR off the offline replicas of broker %d: %s",
                     broker_id, ", ".join(f"{s.topic}-{s.partition} leader {s.leader} isr "
                                          f"{list(s.isr)}" for s in changed))
            c._send(changed)
        else:
            # No state changed (e.g. no other replica to lead): the metadata says which
            # replicas are offline all the same.
            c._send_update_metadata([c.states[tp] for tp in sorted(tps) if tp in c.states])


def response_errors(response: Any, names: Mapping[uuid.UUID, str]
                    ) -> dict[TopicPartition, int]:
    """Per partition error code of a LeaderAndIsr response of any version (v5+ name
    topics by id: ``names``); empty when the whole request was refused."""
    if int(getattr(response, "error_code", 0)):
        return {}
    out: dict[TopicPartition, int] = {}
    for p in getattr(response, "partition_errors", ()) or ():
        out[(str(p.topic_name), int(p.partition_index))] = int(p.error_code)
    for topic in getattr(response, "topics", ()) or ():
        name = names.get(topic.topic_id)
        if name is None:
            continue
        for p in topic.partition_errors:
            out[(name, int(p.partition_index))] = int(p.error_code)
    return out


def _replace(state: PartitionState, **changes: Any) -> PartitionState:
    from dataclasses import replace

    return replace(state, **changes)
