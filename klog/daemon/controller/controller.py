"""Controller election, partition leader election, and the events that drive them.

Metastore watches fire on the metastore's thread; each one only queues an event for the
controller's task on the event loop, which handles events one at a time. Metastore calls
run in worker threads so a slow ZooKeeper never stalls produce and fetch.

Leader election follows Kafka's OfflinePartitionLeaderElectionStrategy: the first replica
of the assignment that is alive and in the ISR; if none is, and unclean election is
enabled, the first alive replica; else no leader (-1). A new partition's leader is its
first alive replica, at leader epoch 0; every change of leader bumps the epoch.

A broker gone from /brokers/ids leaves the ISRs it followed at once (Kafka's
onBrokerFailure), not after its leaders' lag checks: on the broker change, and at
failover for brokers that died while no controller watched -- the previous
controller's own broker first of all (Kafka's onControllerFailover).

A replica on a failed log dir of its broker (log_dir_events.py, from the brokers'
LeaderAndIsr answers) is never elected, and gives up its leadership and ISR places.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from prometheus_client.core import Metric

from klog.daemon.config_changes import read_entity_config
from klog.daemon.controller import (
    channel,
    identity,
    leader_balance,
    log_dir_events,
    reassignment,
    receiver,
)
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import (
    BadVersionError,
    ConnectionLossError,
    CreateOp,
    MetastoreError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    SetOp,
    WatchedEvent,
    Watcher,
    ZnodeStat,
)
from klog.daemon.metrics.collectors import gauge
from klog.daemon.security.listener import inter_broker_client_security
from klog.daemon.tasks import answer, returning, stop_task
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.metastore.base import MetadataStore
    from klog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
#: New partitions announced per LeaderAndIsr/UpdateMetadata step (see _send_new_partitions).
NEW_PARTITIONS_STEP = 500

TopicPartition = tuple[str, int]



class Controller:
    """The controller of a cluster (standalone: of the one broker). Each broker runs one; the
    one that wins the election in the metastore is active. Decisions reach this broker
    in-process through its ``ControlRequestReceiver``, other brokers over the channel."""

    def __init__(self, broker_id: int, config: DynamicBrokerConfig, metastore: MetadataStore,
                 metadata_cache: MetadataCache, controller_identity: identity.ControllerIdentity,
                 control_requests: receiver.ControlRequestReceiver,
                 log_manager: LogManager) -> None:
        self.broker_id = broker_id
        self.config = config
        self.store = metastore
        self.metadata_cache = metadata_cache
        self.controller_identity = controller_identity
        self.control_requests = control_requests
        self.log_manager = log_manager
        # A dynamic switch of unclean.leader.election.enable to true elects at once.
        config.add_reconfigurable(self._reconfigure)
        self.active = False
        self.epoch = 0
        self.topics: dict[str, paths.TopicAssignment] = {}
        # Topics in /admin/delete_topics whose deletion waits for a partition reassignment
        # to finish (Kafka's topics ineligible for deletion); their partitions take no new
        # reassignment meanwhile.
        self.deletion_waiting: set[str] = set()
        self.states: dict[TopicPartition, PartitionState] = {}
        self.live_brokers: dict[int, BrokerInfo] = {}
        # czxid of each live broker's registration (its broker epoch, KIP-380).
        self.broker_epochs: dict[int, int] = {}
        # Brokers that asked for a controlled shutdown: no leadership goes to them.
        self.shutting_down: set[int] = set()
        self.channel: channel.ControllerChannelManager | None = None
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        # Elections on request, the preferred-election znode, auto rebalance (E).
        self.balance = leader_balance.LeaderBalancer(self)
        # Partition reassignments (KIP-455) and /admin/reassign_partitions (R).
        self.reassignments = reassignment.ReassignmentManager(self)
        # Replicas on failed log dirs: /log_dir_event_notification, LeaderAndIsr answers.
        self.log_dirs = log_dir_events.LogDirEvents(self)

    def _reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        if new.unclean_leader_election_enable and not old.unclean_leader_election_enable:
            self.unclean_enabled_changed(None)

    # -- lifecycle --------------------------------------------------------------------------

    async def startup(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._elect()
        self._task = self._loop.create_task(self._run())

    async def shutdown(self) -> None:
        self._closed = True
        if self._task is not None:
            await stop_task(self._task, what="the controller's event loop")
        await self._resign()

    async def _resign(self) -> None:
        self.active = False
        self.deletion_waiting.clear()  # the next controller finds them in the znodes
        self.balance.on_resign()
        self.log_dirs.on_resign()
        if self.channel is not None:
            chan, self.channel = self.channel, None
            await chan.close()

    def session_renewed(self) -> None:
        """The broker has a new metastore session (the old one expired): its watches went
        with it, so run the election again (become controller, or watch the one there)."""
        if self._loop is not None and not self._closed:
            self._queue.put_nowait(("controller_change", None))

    def connection_restored(self) -> None:
        """The metastore connection came back within the same session. ZooKeeper's own
        client keeps watches across such a blip; kazoo drops them all (metastore/
        zookeeper.py), so every watch is set again here. Without it a controller went
        deaf: brokers leaving and joining were never noticed again (the chaos harness,
        seed 2929: a broker restarted after a ZooKeeper node was cut off never got a
        LeaderAndIsr and answered its followers UNKNOWN_TOPIC_OR_PARTITION)."""
        if self._loop is not None and not self._closed:
            self._queue.put_nowait(("reconnected", None))

    async def _on_reconnected(self) -> None:
        """Read again what each lost watch was on, setting it anew, and act on what
        changed meanwhile, as if each watch had fired (each handler re-reads, so an event
        that changed nothing costs one read)."""
        if not self.active:
            await self._elect()  # watches /controller again (or takes office if it went)
            return
        await self._call(self.store.exists, paths.CONTROLLER, self._watcher("controller_change"))
        events: list[tuple[str, Any]] = [("brokers", None), ("topics", None),
                                         ("isr_change", None), ("delete_topics", None),
                                         ("reassign_partitions", None),
                                         (leader_balance.PREFERRED_REPLICA_ELECTION, None)]
        events += [("topic_data", name) for name in sorted(self.topics)]
        watched, self.reassignments._watched = self.reassignments._watched, set()
        events += [("reassign_isr", tp) for tp in sorted(watched)]
        for event in events:
            self._queue.put_nowait(event)

    async def elect_leaders(self, election_type: int, tps: list[TopicPartition] | None
                            ) -> dict[TopicPartition, tuple[int, str | None]]:
        """ElectLeaders: 0 PREFERRED, 1 UNCLEAN; ``tps`` None = every partition. An event
        in the controller's queue (klog/daemon/controller/leader_balance.py)."""
        return await self.balance.request(election_type, tps)

    async def alter_partition_reassignments(
            self, targets: dict[TopicPartition, list[int] | None],
            allow_rf_change: bool = True) -> dict[TopicPartition, tuple[int, str | None]]:
        """AlterPartitionReassignments: a target per partition (None cancels); (error
        code, message) per partition. An event in the controller's queue
        (klog/daemon/controller/reassignment.py)."""
        assert self._loop is not None
        future: asyncio.Future[dict[TopicPartition, tuple[int, str | None]]] = (
            self._loop.create_future())
        self._queue.put_nowait(("alter_reassignments", (targets, allow_rf_change, future)))
        return await future

    def list_partition_reassignments(self, tps: list[TopicPartition] | None
                                     ) -> dict[TopicPartition,
                                               tuple[list[int], list[int], list[int]]]:
        """Ongoing reassignments (replicas, adding, removing) among ``tps`` (None: all)."""
        return self.reassignments.list(tps)

    def is_reassigning(self, tp: TopicPartition) -> bool:
        return self.reassignments.is_reassigning(tp)

    async def controlled_shutdown(self, broker_id: int,
                                  broker_epoch: int) -> tuple[int, list[TopicPartition]]:
        """ControlledShutdown from ``broker_id``: move its leaderships away (an event in
        the controller's queue, so it never races a broker or topic change). Returns the
        error code and the partitions it still leads."""
        assert self._loop is not None
        future: asyncio.Future[tuple[int, list[TopicPartition]]] = self._loop.create_future()
        self._queue.put_nowait(("controlled_shutdown", (broker_id, broker_epoch, future)))
        return await future

    def _watcher(self, kind: str, arg: object = None) -> Watcher:
        loop = self._loop
        assert loop is not None

        def fire(event: WatchedEvent) -> None:
            if not self._closed:
                loop.call_soon_threadsafe(self._queue.put_nowait, (kind, arg))

        return fire

    async def _run(self) -> None:
        while True:
            kind, arg = await self._queue.get()
            try:
                await self._process(kind, arg)
            except asyncio.CancelledError:
                raise
            except (SessionExpiredError, ConnectionLossError) as exc:
                # Not a bug: the metastore went away under us. Without a session this
                # broker's /controller is gone and another broker takes over: resign (the
                # broker asks for an election again once it has a new session).
                log.warning("controller event %s failed: %s: %s", kind,
                            type(exc).__name__, exc)
                if isinstance(exc, SessionExpiredError) and self.active:
                    log.warning("broker %d resigns as controller: its ZooKeeper session "
                                "expired", self.broker_id)
                    await self._resign()
            except Exception:
                log.exception("controller event %s(%s) failed", kind, arg)

    async def _process(self, kind: str, arg: Any) -> None:
        if kind == "controller_change":
            await self._elect()
            return
        if kind == "reconnected":
            await self._on_reconnected()
            return
        if kind in leader_balance.EVENTS:
            await self.balance.process(kind, arg)
            return
        if kind == "alter_reassignments":
            targets, allow_rf_change, future = arg
            await answer(future, lambda: self.reassignments.alter(targets, allow_rf_change)
                         if self.active else
                         returning({tp: (int(ErrorCode.NOT_CONTROLLER), None) for tp in targets}))
            return
        if kind == "controlled_shutdown":
            broker_id, broker_epoch, future = arg
            await answer(future, lambda: self._on_controlled_shutdown(broker_id, broker_epoch)
                         if self.active else returning((int(ErrorCode.NOT_CONTROLLER), [])))
            return
        if not self.active:
            return
        if kind == "topics":
            await self._on_topic_change()
        elif kind == "topic_data":
            await self._on_topic_data(arg)
        elif kind == "delete_topics":
            await self._on_delete_topics()
        elif kind == "brokers":
            await self._on_broker_change()
        elif kind == "isr_change":
            await self._on_isr_change()
        elif kind == "unclean_enabled":
            await self._on_unclean_enabled(arg)
        elif kind == "reassign_partitions":
            await self.reassignments.on_legacy_znode()
        elif kind == "reassign_isr":
            await self.reassignments.on_isr_watch(arg)
        elif kind == "log_dir_event":
            await self.log_dirs.on_notification()
        elif kind == "leader_and_isr_response":
            await self.log_dirs.process_response(*arg)

    async def _call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """A blocking metastore call, made in a worker thread."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    # -- election ---------------------------------------------------------------------------

    async def _elect(self) -> None:
        payload = paths.ControllerRegistration(self.broker_id, int(time.time() * 1000)).encode()
        try:
            self.epoch = await self._call(self._register, payload)
        except (NodeExistsError, BadVersionError):  # another broker won this round
            try:
                data, _ = await self._call(self.store.get, paths.CONTROLLER,
                                           self._watcher("controller_change"))
                registration = paths.ControllerRegistration.decode(data)
                self.metadata_cache.controller_id = registration.broker_id
                if self.active and registration.broker_id != self.broker_id:
                    log.info("broker %d is no longer the controller", self.broker_id)
                    await self._resign()
                # Whose control requests this broker obeys from now on (with the epoch
                # of that election, read as a consistent pair).
                self.controller_identity.learned(
                    *await self._call(identity.read_active_controller, self.store))
            except NoNodeError:
                self._queue.put_nowait(("controller_change", None))
            return
        await self._call(self.store.exists, paths.CONTROLLER,
                         self._watcher("controller_change"))
        self.active = True
        self.control_requests.controller_elected(self.epoch)
        self.controller_identity.learned(self.broker_id, self.epoch)
        config = self.config.current
        self.channel = channel.ControllerChannelManager(
            self.broker_id, config.inter_broker_listener_name,
            config.controller_socket_timeout_ms, inter_broker_client_security(config))
        self.live_brokers = {}
        self.broker_epochs = {}
        self.shutting_down = set()
        self.metadata_cache.controller_id = self.broker_id
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        await self._on_failover()

    def _register(self, payload: bytes) -> int:
        """Create /controller and bump /controller_epoch in one multi -> the new epoch, as
        Kafka's registerControllerAndIncrementControllerEpoch: nobody reads the new
        controller under the old epoch, and a broker whose epoch write loses a race
        (BadVersionError) or that finds a controller (NodeExistsError) takes no office."""
        store = self.store
        try:
            data, stat = store.get(paths.CONTROLLER_EPOCH)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):  # Kafka's initial epoch, 0
                store.create(paths.CONTROLLER_EPOCH, b"0")
            data, stat = store.get(paths.CONTROLLER_EPOCH)
        epoch = int(data.decode() or "0") + 1
        store.multi([CreateOp(paths.CONTROLLER, payload, ephemeral=True),
                     SetOp(paths.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)])
        return epoch

    async def _on_failover(self) -> None:
        await self._read_brokers()
        if not self.config.current.zookeeper_connect:
            await self._call(self._adopt_orphan_logs)
        names = await self._call(self.store.get_children, paths.BROKER_TOPICS,
                                 self._watcher("topics"))
        for name in names:
            assignment = await self._read_assignment(name)
            if assignment is not None:
                self.topics[name] = assignment
        states = await self._call(self._read_states, list(self.topics))
        self.states.update(states)
        # Partitions without a state znode (created while no controller ran) get one now;
        # partitions whose leader is gone get a new one.
        elected = await self._elect_leaders(self._all_partitions())
        # Brokers that died while no controller watched (the previous controller's own
        # broker, above all) leave the ISRs they followed now, as Kafka's
        # onControllerFailover treats replicas on brokers missing from /brokers/ids as
        # offline: else acks=all waits for the leader's lag check (replica.lag.time.max.ms).
        dead = {r for s in self.states.values() for r in s.isr if r not in self.live_brokers}
        if dead:
            done = {(s.topic, s.partition) for s in elected}
            shrunk = await self._remove_from_isr(dead, skip=done)
            if shrunk:
                log.info("brokers %s are not registered: removed from the ISR of %s",
                         sorted(dead), [f"{s.topic}-{s.partition}" for s in shrunk])
        await self._on_delete_topics()
        self._send_all()
        await self._on_isr_change()
        await self.log_dirs.on_notification()
        await self.reassignments.on_failover()
        await self.balance.on_failover()

    def _adopt_orphan_logs(self) -> None:
        """Standalone: partitions found in the log dirs that the metastore does not know
        (a log dir written by Apache Kafka, or by a klog whose metastore was lost) become
        topics again, each partition on this broker."""
        found: dict[str, set[int]] = {}
        for topic, partition in self.log_manager.all_logs():
            found.setdefault(topic, set()).add(partition)
        for topic, parts in found.items():
            if self.store.exists(paths.topic_path(topic)) is not None:
                continue
            assignment = {p: [self.broker_id] for p in range(max(parts) + 1)}
            try:
                if self.store.exists(paths.topic_config_path(topic)) is None:
                    self.store.create(paths.topic_config_path(topic),
                                      paths.EntityConfig(config={}).encode(), make_parents=True)
                self.store.create(paths.topic_path(topic), paths.TopicAssignment(
                    partitions={p: paths.ReplicaAssignment(tuple(r))
                                for p, r in assignment.items()},
                    topic_id=paths.new_kafka_uuid()).encode(), make_parents=True)
                log.info("adopted topic %s (%d partitions) found in the log dirs", topic,
                         len(assignment))
            except MetastoreError as exc:
                log.warning("cannot adopt topic %s from the log dirs: %s", topic, exc)

    async def _read_brokers(self) -> set[int]:
        """Re-read /brokers/ids; returns the brokers that re-registered (a new broker
        epoch under a known id: restarted between two watch events)."""
        ids = await self._call(self.store.get_children, paths.BROKER_IDS,
                               self._watcher("brokers"))
        live: dict[int, BrokerInfo] = {}
        epochs: dict[int, int] = {}
        for name in ids:
            try:
                data, stat = await self._call(self.store.get, paths.broker_path(int(name)))
            except (NoNodeError, ValueError):
                continue
            reg = paths.BrokerRegistration.decode(int(name), data)
            live[reg.broker_id] = BrokerInfo(
                reg.broker_id,
                tuple(BrokerEndpoint(e.listener_name, e.host or "", e.port, e.security_protocol)
                      for e in reg.endpoints),
                reg.rack,
            )
            epochs[reg.broker_id] = stat.czxid
        bounced = {b for b, e in epochs.items()
                   if b in self.broker_epochs and self.broker_epochs[b] != e}
        self.live_brokers = live
        self.broker_epochs = epochs
        # A broker that left (or came back as a new incarnation) is no longer stopping.
        self.shutting_down &= set(live) - bounced
        if self.channel is not None:
            for broker_id in self.channel.brokers():
                if broker_id not in live or broker_id in bounced:
                    self.channel.remove_broker(broker_id)
            for broker_id, info in live.items():
                if broker_id != self.broker_id:
                    self.channel.add_broker(info)
        return bounced

    def _alive(self, broker_id: int) -> bool:
        """Eligible to lead: registered and not shutting down."""
        return broker_id in self.live_brokers and broker_id not in self.shutting_down

    def _replica_online(self, broker_id: int, tp: TopicPartition) -> bool:
        """Eligible to lead ``tp``: alive, and its replica not on a failed log dir
        (Kafka's isReplicaOnline)."""
        return self._alive(broker_id) and self.log_dirs.is_online(broker_id, tp)

    async def _read_assignment(self, name: str) -> paths.TopicAssignment | None:
        try:
            data, _ = await self._call(self.store.get, paths.topic_path(name),
                                       self._watcher("topic_data", name))
        except NoNodeError:
            return None
        return paths.TopicAssignment.decode(data, name)

    def _read_states(self, topics: Iterable[str]) -> dict[TopicPartition, PartitionState]:
        out: dict[TopicPartition, PartitionState] = {}
        for topic in topics:
            assignment = self.topics[topic]
            for partition, ra in assignment.partitions.items():
                replicas = ra.replicas
                try:
                    data, stat = self.store.get(paths.partition_state_path(topic, partition))
                except NoNodeError:
                    continue
                st = paths.LeaderIsrAndControllerEpoch.decode(data)
                out[(topic, partition)] = PartitionState(
                    topic, partition, st.leader, st.leader_epoch, tuple(replicas),
                    tuple(st.isr), st.controller_epoch, stat.version,
                )
        return out

    def _all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, a in self.topics.items() for p in sorted(a.partitions)]

    # -- leader election --------------------------------------------------------------------

    async def _elect_leaders(self, tps: Iterable[TopicPartition]) -> list[PartitionState]:
        """Give every partition in ``tps`` whose leader is missing or dead a leader, and
        write the new states; returns the states that changed, as written (their znode
        versions are what the new leaders' first ISR change must match).

        The ISR an election picks from is re-read from ZooKeeper first, as Kafka's
        controller does: leaders shrink it there by compare-and-set and tell the controller
        only later (/isr_change_notification), so the cached one may still list a replica
        that fell behind -- electing it would lose acknowledged records."""
        creates: list[PartitionState] = []
        candidates: list[TopicPartition] = []
        for tp in tps:
            replicas = tuple(self.topics[tp[0]].partitions[tp[1]].replicas)
            alive = [r for r in replicas if self._alive(r)]
            current = self.states.get(tp)
            if current is None:
                leader = alive[0] if alive else -1
                creates.append(PartitionState(tp[0], tp[1], leader, 0, replicas,
                                              tuple(alive) if alive else replicas, self.epoch))
                continue
            if self._replica_online(current.leader, tp) and current.leader in replicas:
                if current.replicas != replicas:
                    self.states[tp] = _replace(current, replicas=replicas)
                continue
            candidates.append(tp)
        updates: list[PartitionState] = []
        if candidates:
            fresh = await self._call(self._read_partition_states, candidates)
            for tp in candidates:
                current = fresh.get(tp) or self.states[tp]
                self.states[tp] = current
                replicas = tuple(self.topics[tp[0]].partitions[tp[1]].replicas)
                leader, isr = await self._choose_leader_async(tp, replicas, current.isr)
                if leader == current.leader:
                    continue
                updates.append(PartitionState(tp[0], tp[1], leader, current.leader_epoch + 1,
                                              replicas, isr, self.epoch, current.zk_version))
        if creates:
            await self._call(self._create_states, creates)
        if updates:
            await self._call(self._update_states, updates)
        return [self.states.get((s.topic, s.partition), s) for s in creates + updates]

    def _choose_leader(self, replicas: tuple[int, ...], isr: Iterable[int],
                       unclean: bool = False, tp: TopicPartition | None = None
                       ) -> tuple[int, tuple[int, ...]]:
        """Kafka's OfflinePartitionLeaderElectionStrategy: (leader, new ISR). ``unclean``:
        the topic's unclean.leader.election.enable (``_unclean_enabled``), which matters
        only when ``_needs_unclean``. With ``tp``, replicas on failed log dirs are out."""
        isr = tuple(isr)
        online = self._alive if tp is None else (lambda r: self._replica_online(r, tp))
        isr_alive = [r for r in replicas if r in isr and online(r)]
        if isr_alive:
            return isr_alive[0], tuple(isr_alive)
        alive = [r for r in replicas if online(r)]
        if unclean and alive:
            return alive[0], (alive[0],)
        return -1, isr

    def _needs_unclean(self, replicas: tuple[int, ...], isr: Iterable[int],
                       tp: TopicPartition | None = None) -> bool:
        """No ISR member of ``replicas`` is alive, but another replica is."""
        isr = set(isr)
        online = self._alive if tp is None else (lambda r: self._replica_online(r, tp))
        alive = [r for r in replicas if online(r)]
        return bool(alive) and not any(r in isr for r in alive)

    def _unclean_enabled(self, topic: str) -> bool:
        """unclean.leader.election.enable for ``topic``: its override in /config/topics,
        else the broker's setting -- read when needed, as Kafka's controller does, so an
        override written a moment ago counts. Blocking (metastore): off the loop."""
        default = bool(self.config.current.unclean_leader_election_enable)
        try:
            overrides = read_entity_config(self.store, paths.CONFIG_TYPE_TOPIC, topic)
        except Exception as exc:  # the metastore is unreachable: the broker's setting
            log.warning("cannot read the config of topic %s: %s", topic, exc)
            return default
        value = str(overrides.get("unclean.leader.election.enable", "")).strip().lower()
        return {"true": True, "false": False}.get(value, default)

    async def _choose_leader_async(self, tp: TopicPartition, replicas: tuple[int, ...],
                                   isr: Iterable[int]) -> tuple[int, tuple[int, ...]]:
        isr = tuple(isr)
        unclean = self._needs_unclean(replicas, isr, tp) and \
            await self._call(self._unclean_enabled, tp[0])
        return self._choose_leader(replicas, isr, unclean, tp)

    def unclean_enabled_changed(self, topics: Iterable[str] | None) -> None:
        """unclean.leader.election.enable may have been turned on (for ``topics``, or
        every topic when None): offline partitions get an election now, as Kafka's
        controller does on a dynamic change, not only at the next broker change."""
        if self.active:
            self._queue.put_nowait(("unclean_enabled", None if topics is None
                                    else tuple(topics)))

    async def _on_unclean_enabled(self, topics: tuple[str, ...] | None) -> None:
        offline = [tp for tp, s in sorted(self.states.items())
                   if (topics is None or tp[0] in topics)
                   and (s.leader < 0 or not self._alive(s.leader))
                   and tp[0] in self.topics and tp[0] not in self.deletion_waiting]
        if offline:
            changed = await self._elect_leaders(offline)
            if changed:
                log.info("unclean.leader.election.enable turned on: elected leaders of %s",
                         [f"{s.topic}-{s.partition}" for s in changed])
                self._send(changed)

    def _create_states(self, states: list[PartitionState]) -> None:
        ops = []
        for s in states:
            self.store.ensure_path(paths.topic_partitions_path(s.topic))
            ops.append(CreateOp(paths.partition_state_path(s.topic, s.partition),
                                paths.LeaderIsrAndControllerEpoch(
                                    leader=s.leader, leader_epoch=s.leader_epoch,
                                    isr=tuple(s.isr),
                                    controller_epoch=s.controller_epoch).encode()))
        # The partition dirs need their parents; ensure_path created them above.
        parents = {paths.partition_path(s.topic, s.partition) for s in states}
        for parent in parents:
            self.store.ensure_path(parent)
        try:
            self.store.multi(ops)
            for s in states:
                self.states[(s.topic, s.partition)] = s
        except NodeExistsError:
            # Written meanwhile (another controller generation): fall back to one by one.
            for s, op in zip(states, ops, strict=True):
                try:
                    self.store.create(op.path, op.data)
                    self.states[(s.topic, s.partition)] = s
                except NodeExistsError:
                    data, stat = self.store.get(op.path)
                    st = paths.LeaderIsrAndControllerEpoch.decode(data)
                    self.states[(s.topic, s.partition)] = PartitionState(
                        s.topic, s.partition, st.leader, st.leader_epoch, s.replicas,
                        tuple(st.isr), st.controller_epoch, stat.version)

    def _update_states(self, states: list[PartitionState]) -> None:
        for s in states:
            path = paths.partition_state_path(s.topic, s.partition)
            try:
                stat = self._write_state(path, s)
            except BadVersionError:
                # The leader changed the ISR meanwhile (its compare-and-set bumped the
                # version): keep our decision on the ISR both agree on, and retry once.
                data, fresh = self.store.get(path)
                st = paths.LeaderIsrAndControllerEpoch.decode(data)
                if st.leader_epoch >= s.leader_epoch:
                    log.warning("state of %s-%d moved to leader epoch %d meanwhile",
                                s.topic, s.partition, st.leader_epoch)
                    self.states[(s.topic, s.partition)] = _replace(
                        s, leader=st.leader, leader_epoch=st.leader_epoch, isr=tuple(st.isr),
                        controller_epoch=st.controller_epoch, zk_version=fresh.version)
                    continue
                tp = (s.topic, s.partition)
                if s.leader >= 0 and s.leader in st.isr and self._replica_online(s.leader, tp):
                    # Our leader is still in the ISR: keep it, on the ISR both agree on.
                    isr = tuple(r for r in s.isr if r in st.isr) or (s.leader,)
                    leader = s.leader
                else:
                    # The ISR we chose from lost the replica we picked: elect again from
                    # the ISR as it is now (never a replica that fell behind).
                    unclean = self._needs_unclean(s.replicas, st.isr, tp) and \
                        self._unclean_enabled(s.topic)
                    leader, isr = self._choose_leader(s.replicas, st.isr, unclean, tp)
                s = _replace(s, leader=leader, isr=isr, zk_version=fresh.version)
                stat = self._write_state(path, s)
            self.states[(s.topic, s.partition)] = _replace(s, zk_version=stat.version)

    def _write_state(self, path: str, s: PartitionState) -> ZnodeStat:
        return self.store.set(path, paths.LeaderIsrAndControllerEpoch(
            leader=s.leader, leader_epoch=s.leader_epoch, isr=tuple(s.isr),
            controller_epoch=s.controller_epoch).encode(), version=s.zk_version)

    # -- events -----------------------------------------------------------------------------

    async def _on_topic_change(self) -> None:
        names = await self._call(self.store.get_children, paths.BROKER_TOPICS,
                                 self._watcher("topics"))
        new = [n for n in names if n not in self.topics]
        gone = [n for n in self.topics if n not in names]
        for name in gone:
            self._forget_topic(name)
        changed: list[PartitionState] = []
        for name in new:
            assignment = await self._read_assignment(name)
            if assignment is None:
                continue
            self.topics[name] = assignment
            changed += await self._elect_leaders((name, p) for p in sorted(assignment.partitions))
        if changed:
            await self._send_new_partitions(changed)

    async def _on_topic_data(self, name: str) -> None:
        assignment = await self._read_assignment(name)
        if assignment is None or name not in self.topics:
            return
        known = set(self.topics[name].partitions)
        self.topics[name] = assignment
        added = [(name, p) for p in sorted(assignment.partitions) if p not in known]
        changed = await self._elect_leaders(added) if added else []
        if changed:
            await self._send_new_partitions(changed)

    async def _on_delete_topics(self) -> None:
        try:
            names = await self._call(self.store.get_children, paths.DELETE_TOPICS,
                                     self._watcher("delete_topics"))
        except NoNodeError:
            await self._call(self.store.ensure_path, paths.DELETE_TOPICS)
            names = await self._call(self.store.get_children, paths.DELETE_TOPICS,
                                     self._watcher("delete_topics"))
        for name in names:
            if not self.config.current.delete_topic_enable:
                await self._call(self._delete_quietly, paths.delete_topic_path(name))
                continue
            if name in self.topics:
                moving = [p for p, ra in sorted(self.topics[name].partitions.items())
                          if reassignment.is_being_reassigned(ra)]
                if moving:
                    # As Kafka: a topic with a reassignment in flight is deleted once the
                    # reassignment ends; the request stays in /admin/delete_topics.
                    if name not in self.deletion_waiting:
                        log.info("deletion of topic %s waits for the reassignment of its "
                                 "partitions %s", name, moving)
                    self.deletion_waiting.add(name)
                    continue
                tps = [(name, p) for p in self.topics[name].partitions]
                for broker_id in self.live_brokers:
                    self._send_stop_replica(broker_id, tps, delete=True)
                deleting = [_replace(s, leader=receiver.LEADER_DURING_DELETE)
                            for tp, s in self.states.items() if tp[0] == name]
                remote = [b for b in self.live_brokers if b != self.broker_id]
                if deleting and remote:
                    self._send_update_metadata(deleting, remote)
                self._forget_topic(name)
            self.deletion_waiting.discard(name)
            await self._call(self._delete_topic_znodes, name)

    def _delete_topic_znodes(self, name: str) -> None:
        self._delete_quietly(paths.topic_path(name), recursive=True)
        self._delete_quietly(paths.topic_config_path(name))
        self._delete_quietly(paths.delete_topic_path(name))

    def _delete_quietly(self, path: str, recursive: bool = False) -> None:
        with contextlib.suppress(NoNodeError):
            self.store.delete(path, recursive=recursive)

    def _forget_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        for tp in [tp for tp in self.states if tp[0] == name]:
            del self.states[tp]
        self.control_requests.topic_deleted(name)

    async def _remove_from_isr(self, gone: set[int],
                               skip: set[TopicPartition]) -> list[PartitionState]:
        """Dead brokers leave the ISR of the partitions they followed (Kafka's move to
        OfflineReplica), at a new leader epoch; the last ISR member is never removed, so
        that a partition whose ISR died keeps the replica that may lead it cleanly."""
        updates = []
        for tp, s in self.states.items():
            if tp in skip or s.leader in gone or s.leader < 0:
                continue
            isr = tuple(r for r in s.isr if r not in gone)
            if isr != s.isr and isr:
                updates.append(_replace(s, isr=isr, leader_epoch=s.leader_epoch + 1,
                                        controller_epoch=self.epoch))
        if not updates:
            return []
        await self._call(self._update_states, updates)
        return [self.states[(s.topic, s.partition)] for s in updates]

    async def _on_isr_change(self) -> None:
        """Leaders changed ISRs (klog/daemon/replica_manager.py writes the state znode,
        then a notification): re-read those states and tell every broker, then delete
        the notifications (Kafka's IsrChangeNotification event)."""
        watch = self._watcher("isr_change")
        try:
            names = await self._call(self.store.get_children, paths.ISR_CHANGE_NOTIFICATION,
                                     watch)
        except NoNodeError:
            await self._call(self.store.ensure_path, paths.ISR_CHANGE_NOTIFICATION)
            names = await self._call(self.store.get_children, paths.ISR_CHANGE_NOTIFICATION,
                                     watch)
        if not names:
            return
        tps = await self._call(self._take_isr_changes, sorted(names))
        known = [tp for tp in tps if tp in self.states]
        fresh = await self._call(self._read_partition_states, known)
        self.states.update(fresh)
        if fresh:
            self._send_update_metadata(list(fresh.values()))
            await self.reassignments.maybe_complete(fresh)

    def _take_isr_changes(self, names: list[str]) -> set[TopicPartition]:
        tps: set[TopicPartition] = set()
        for name in names:
            path = f"{paths.ISR_CHANGE_NOTIFICATION}/{name}"
            try:
                data, _ = self.store.get(path)
                tps.update(paths.IsrChangeNotification.decode(data).partitions)
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("ignoring %s: %s", path, exc)
            self._delete_quietly(path)
        return tps

    def _read_partition_states(self, tps: Iterable[TopicPartition]
                               ) -> dict[TopicPartition, PartitionState]:
        out: dict[TopicPartition, PartitionState] = {}
        for tp in tps:
            try:
                data, stat = self.store.get(paths.partition_state_path(*tp))
            except NoNodeError:
                continue
            st = paths.LeaderIsrAndControllerEpoch.decode(data)
            out[tp] = _replace(self.states[tp], leader=st.leader, leader_epoch=st.leader_epoch,
                               isr=tuple(st.isr), controller_epoch=st.controller_epoch,
                               zk_version=stat.version)
        return out

    async def _on_broker_change(self) -> None:
        before = set(self.live_brokers)
        bounced = await self._read_brokers()
        after = set(self.live_brokers)
        # Kafka forgets the offline replicas of brokers that start up or fail.
        self.log_dirs.broker_changed((before - after) | (after - before) | bounced)
        if before == after and not bounced:
            self._send_update_metadata(list(self.states.values()))
            return
        changed = await self._elect_leaders(self._all_partitions())
        gone = (before - after) | bounced
        if gone:
            done = {(s.topic, s.partition) for s in changed}
            changed += await self._remove_from_isr(gone, skip=done)
        new_brokers = (after - before) | bounced
        if new_brokers:
            log.info("brokers joined: %s; gone: %s", sorted(new_brokers),
                     sorted(before - after))
        # A joining broker learns the cluster first (so it can reach its leaders), then
        # its own replicas' states (Kafka's onBrokerStartup).
        self._send_update_metadata(list(self.states.values()), new_brokers)
        for broker_id in new_brokers:
            mine = [s for s in self.states.values() if broker_id in s.replicas]
            if mine:
                self._send_leader_and_isr(broker_id, mine)
        self._send(changed, update_all=True)

    # -- controlled shutdown ----------------------------------------------------------------

    async def _on_controlled_shutdown(self, broker_id: int,
                                      broker_epoch: int) -> tuple[int, list[TopicPartition]]:
        """Kafka's doControlledShutdown: leaderships of ``broker_id`` move to the first
        other live ISR replica in assignment order; where it follows, it leaves the ISR
        and stops its replica. Partitions of one replica stay (nothing to move to).

        Only a registered broker, at its current broker epoch, may ask: a request for a
        broker that is not registered is BROKER_NOT_AVAILABLE, one without a broker epoch
        (v0-1, or -1) or with another epoch STALE_BROKER_EPOCH -- stricter than Kafka,
        which lets an unknown epoch through, because without authentication anyone can
        send this request and it takes a broker's leaderships away (klog's own brokers
        always send v2+ with their epoch, klog/daemon/controller/shutdown.py)."""
        if broker_id not in self.live_brokers:
            return int(ErrorCode.BROKER_NOT_AVAILABLE), []
        cached = self.broker_epochs.get(broker_id, receiver.UNKNOWN_BROKER_EPOCH)
        if broker_epoch > cached != receiver.UNKNOWN_BROKER_EPOCH:
            # Newer than the registration this controller knows: the broker restarted and
            # the /brokers/ids watch has not been processed yet, or a forgery. Catch up
            # only if ZooKeeper has that registration (the broker epoch is its czxid).
            stat = await self._call(self.store.exists, paths.broker_path(broker_id))
            if stat is not None and stat.czxid == broker_epoch:
                await self._on_broker_change()
                cached = self.broker_epochs.get(broker_id, receiver.UNKNOWN_BROKER_EPOCH)
            if broker_id not in self.live_brokers:
                return int(ErrorCode.BROKER_NOT_AVAILABLE), []
        if broker_epoch == receiver.UNKNOWN_BROKER_EPOCH or broker_epoch != cached:
            log.warning("refused controlled shutdown of broker %d at broker epoch %d "
                        "(its registration's is %d)", broker_id, broker_epoch, cached)
            return int(ErrorCode.STALE_BROKER_EPOCH), []
        self.shutting_down.add(broker_id)
        log.info("controlled shutdown of broker %d", broker_id)
        updates: list[PartitionState] = []
        followed: list[PartitionState] = []
        for s in self.states.values():
            if broker_id not in s.replicas or len(s.replicas) <= 1 or s.leader == -1:
                continue
            isr = tuple(r for r in s.isr if r != broker_id)
            if s.leader == broker_id:
                candidates = [r for r in s.replicas if r in isr and self._alive(r)]
                if candidates:
                    updates.append(_replace(s, leader=candidates[0], isr=isr,
                                            leader_epoch=s.leader_epoch + 1,
                                            controller_epoch=self.epoch))
            else:
                followed.append(s)
                if broker_id in s.isr and isr:
                    updates.append(_replace(s, isr=isr, leader_epoch=s.leader_epoch + 1,
                                            controller_epoch=self.epoch))
        if updates:
            await self._call(self._update_states, updates)
            changed = [self.states[(s.topic, s.partition)] for s in updates]
            self._send(changed)
        if followed:
            self._send_stop_replica(
                broker_id, [(s.topic, s.partition) for s in followed], delete=False,
                epochs={(s.topic, s.partition): self.states[(s.topic, s.partition)].leader_epoch
                        for s in followed})
        remaining = sorted(tp for tp, s in self.states.items()
                           if s.leader == broker_id and len(s.replicas) > 1)
        return 0, remaining

    # -- requests to brokers ----------------------------------------------------------------
    # The controller's own broker is served in-process (no socket to itself), through the
    # same fencing code as the wire handlers (klog/daemon/controller/receiver.py); the
    # others through the channel (klog/daemon/controller/channel.py), in order.

    def _send_all(self) -> None:
        self._send(list(self.states.values()), update_all=True)

    def _send(self, states: list[PartitionState], update_all: bool = False) -> None:
        by_broker: dict[int, list[PartitionState]] = {}
        for s in states:
            for r in s.replicas:
                if r in self.live_brokers:
                    by_broker.setdefault(r, []).append(s)
        for broker_id, mine in by_broker.items():
            self._send_leader_and_isr(broker_id, mine)
        self._send_update_metadata(list(self.states.values()) if update_all else states)

    async def _send_new_partitions(self, states: list[PartitionState]) -> None:
        """``_send`` for new partitions, NEW_PARTITIONS_STEP at a time, each step's logs on
        this broker made off the event loop first: a topic of thousands of partitions is
        thousands of files to create, which must not stall every client for seconds."""
        for start in range(0, len(states), NEW_PARTITIONS_STEP):
            step = states[start:start + NEW_PARTITIONS_STEP]
            await self.control_requests.prepare_logs(step)
            self._send(step)

    def _topic_ids(self) -> dict[str, uuid.UUID]:
        return {t: a.topic_id for t, a in self.topics.items() if a.topic_id is not None}

    def _send_leader_and_isr(self, broker_id: int, states: list[PartitionState]) -> None:
        # Every answer tells which replicas are on failed log dirs (log_dir_events.py).
        if broker_id == self.broker_id:
            error, errors = self.control_requests.leader_and_isr(
                self.broker_id, self.epoch, self.broker_epochs.get(broker_id, -1), states,
                self._topic_ids())
            if (not error and any(e == ErrorCode.KAFKA_STORAGE_ERROR for e in errors.values())) \
                    or self.log_dirs.offline.get(broker_id):
                self._queue.put_nowait(("leader_and_isr_response", (broker_id, errors)))
            return
        if self.channel is None:
            return
        leaders = [self.live_brokers[s.leader] for s in states if s.leader in self.live_brokers]
        unique = list({b.broker_id: b for b in leaders}.values())
        values = channel.leader_and_isr_values(
            self.broker_id, self.epoch, self.broker_epochs.get(broker_id, -1), states,
            self._topic_ids(), unique, self.channel.listener_name)
        self.channel.send(broker_id, channel.ControlRequest(
            LEADER_AND_ISR, _same_values(values), self.log_dirs.on_leader_and_isr_response))

    def _send_update_metadata(self, states: list[PartitionState],
                              broker_ids: Iterable[int] | None = None) -> None:
        # Kafka's liveOrShuttingDownBrokers: a stopping broker stays in the metadata (it
        # still serves what it has not handed over); its leaderships are what move.
        brokers = list(self.live_brokers.values())
        topic_ids = self._topic_ids()
        targets = list(self.live_brokers) if broker_ids is None else list(broker_ids)
        for broker_id in targets:
            epoch = self.broker_epochs.get(broker_id, -1)
            if broker_id == self.broker_id:
                self.control_requests.update_metadata(self.broker_id, self.epoch, epoch,
                                                      brokers, states, topic_ids)
            elif self.channel is not None:
                values = channel.update_metadata_values(self.broker_id, self.epoch, epoch,
                                                        brokers, states, topic_ids)
                self.channel.send(broker_id, channel.ControlRequest(
                    UPDATE_METADATA, _same_values(values)))

    def _send_stop_replica(self, broker_id: int, tps: list[TopicPartition], delete: bool,
                           epochs: dict[TopicPartition, int] | None = None) -> None:
        epochs = epochs or {}
        broker_epoch = self.broker_epochs.get(broker_id, -1)
        pairs = [(tp, epochs.get(tp, -1)) for tp in tps]
        if broker_id == self.broker_id:
            self.control_requests.stop_replica(self.epoch, broker_epoch,
                                               [(tp, e, delete) for tp, e in pairs])
        elif self.channel is not None:
            values = channel.stop_replica_values(self.broker_id, self.epoch, broker_epoch,
                                                 pairs, delete)
            self.channel.send(broker_id, channel.ControlRequest(
                STOP_REPLICA, _same_values(values)))


def _same_values(values: channel.Values) -> Callable[[int], channel.Values]:
    """A ControlRequest's values for any version (these requests are built once)."""
    return lambda version: values


def _replace(state: PartitionState, **changes: Any) -> PartitionState:
    from dataclasses import replace

    return replace(state, **changes)


class ControllerCollector:
    """KafkaController's gauges: 1 and the cluster's counts on the active controller, 0 on
    the other brokers (as Kafka reports them)."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        active = c.active
        topics = partitions = offline = 0
        if active:
            topics = len(c.topics)
            partitions = len(c.states)
            live = c.live_brokers
            offline = sum(1 for s in c.states.values()
                          if s.leader < 0 or (live and s.leader not in live))
        for name, mbean, value in (
            ("activecontrollercount", "ActiveControllerCount", int(active)),
            ("offlinepartitionscount", "OfflinePartitionsCount", offline),
            ("globalpartitioncount", "GlobalPartitionCount", partitions),
            ("globaltopiccount", "GlobalTopicCount", topics),
        ):
            yield gauge(f"kafka_controller_kafkacontroller_{name}",
                         f"kafka.controller:type=KafkaController,name={mbean}", value)
