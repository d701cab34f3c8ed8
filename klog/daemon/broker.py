"""Broker: assembles one broker process and runs its lifecycle.

Start-up order: check that the open file limit holds the segments on disk, load the logs
(recovering after an unclean shutdown, off the event loop), open the metastore
(file-backed in standalone mode, ZooKeeper when zookeeper.connect is set), settle the
cluster id and meta.properties, open the listeners, register this broker under
/brokers/ids, then start the controller (standalone: it is always this broker's).

Shutdown (SIGTERM/SIGINT or ``shutdown()``): stop accepting, close connections, stop the
controller, flush every log, write the checkpoints and ``.kafka_cleanshutdown``, close
the metastore (the broker's ephemeral registration goes with the session).

Periodic work runs as event-loop tasks; anything that may block on the disk (flushes,
retention, checkpoints) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from klog.daemon import descriptors
from klog.daemon.admin import AdminManager
from klog.daemon.config import BrokerConfig
from klog.daemon.controller import Controller
from klog.daemon.controller.identity import ControllerIdentity
from klog.daemon.group.coordinator import GroupCoordinator
from klog.daemon.group.metadata_manager import GroupMetadataManager
from klog.daemon.handlers import load_handlers
from klog.daemon.log_cleaner import CleanerConfig, LogCleaner
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetadataStore, MetastoreError, NodeExistsError, NoNodeError
from klog.daemon.producer_ids import ProducerIdManager
from klog.daemon.replica_fetcher import ReplicaFetcherManager
from klog.daemon.replica_manager import MetastoreIsrStore, ReplicaManager
from klog.daemon.replication_quota import ReplicationQuotas
from klog.daemon.server import Server, check_listeners
from klog.storage.config import LogConfig
from klog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

METASTORE_DIR = ".klog-metastore"
PRODUCER_EXPIRATION_CHECK_MS = 600_000
_NEVER_MS = 2**40  # ~35 years: anything longer is "never"


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.log_manager: LogManager | None = None
        self.metastore: MetadataStore | None = None
        self.metadata_cache = MetadataCache(self.broker_id)
        self.topic_overrides: dict[str, dict[str, str]] = {}
        self.replica_manager: ReplicaManager | None = None
        self.log_cleaner: LogCleaner | None = None
        self.server: Server | None = None
        self.controller: Controller | None = None
        # Controller fencing (klog/daemon/controller/receiver.py): the newest controller
        # epoch obeyed, and this broker's epoch (czxid of its /brokers/ids registration).
        self.controller_epoch = -1
        self.broker_epoch = -1
        # Who may send this broker control requests over the wire: the controller that
        # ZooKeeper names, nobody when standalone (klog/daemon/controller/identity.py).
        self.controller_identity = ControllerIdentity(
            self.broker_id, bool(config.zookeeper_connect), lambda: self.metastore)
        self.admin = AdminManager(self)
        # Replication (klog/daemon/replica_fetcher.py).
        self.fetcher_manager: ReplicaFetcherManager | None = None
        # Replication throttles (klog/daemon/replication_quota.py); config_changes.py keeps
        # the rates and the topics' throttled-replica lists current.
        self.replication_quotas = ReplicationQuotas.from_config(self.broker_id, self.config)
        # Producer ids for InitProducerId (klog/daemon/producer_ids.py); set in start().
        self.producer_ids: ProducerIdManager | None = None
        # Consumer groups (klog/daemon/group/): offsets store and the group coordinator.
        self.group_manager = GroupMetadataManager(self)
        # Sets its hooks on the manager here, before any partition can load.
        self.group_coordinator = GroupCoordinator(self, self.group_manager)
        self.started_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._shutting_down = False
        self._session_lost = False
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- configuration helpers -------------------------------------------------------------

    def topic_log_config(self, topic: str) -> LogConfig:
        return self.config.log_config(self.topic_overrides.get(topic))

    @property
    def bound_port(self) -> int:
        """The port of the first listener (useful when it was configured as 0)."""
        assert self.server is not None
        return next(iter(self.server.bound.values()))[1]

    @property
    def bootstrap(self) -> str:
        host = self.advertised_endpoints()[0].host
        return f"{host}:{self.bound_port}"

    def advertised_endpoints(self) -> list[BrokerEndpoint]:
        assert self.server is not None
        out = []
        for ep in self.config.advertised_listeners:
            port = ep.port
            if port == 0:
                port = self.server.bound.get(ep.listener_name, ("", 0))[1]
            out.append(BrokerEndpoint(ep.listener_name, ep.host or "127.0.0.1", port,
                                      ep.security_protocol))
        return out

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.started_at = time.monotonic()
        config = self.config
        check_listeners(config.listeners)  # refuse SSL/SASL before any work is done
        # Refuse now, clearly, what would fail half way through loading the logs.
        await asyncio.to_thread(descriptors.check_log_dirs, config.log_dirs)
        self.log_manager = LogManager(
            config.log_dirs, config.log_config(), topic_config=self.topic_log_config,
            producer_id_expiration_ms=config.get("producer.id.expiration.ms"),
        )
        await asyncio.to_thread(self.log_manager.startup)
        for summary in self.log_manager.load_summaries:
            for skipped in summary.skipped:
                log.warning("ignored in %s: %s", summary.log_dir, skipped)
        self.metastore = self._open_metastore()
        await asyncio.to_thread(self.metastore.start)
        cluster_id = await asyncio.to_thread(self._settle_cluster_id)
        self.metadata_cache.cluster_id = cluster_id
        await asyncio.to_thread(self.log_manager.ensure_meta_properties, self.broker_id,
                                cluster_id)
        # Producer id blocks come from /latest_producer_id_block (created with the
        # persistent paths above); the first block is claimed in the background.
        self.producer_ids = ProducerIdManager(self.broker_id, self.metastore)
        self.producer_ids.start()
        # The replica manager owns produce and fetch, with their purgatories and timer.
        self.replica_manager = ReplicaManager(
            self.broker_id, self.log_manager, self.topic_log_config,
            isr_store=MetastoreIsrStore(self.metastore),
            replica_lag_time_max_ms=config.get("replica.lag.time.max.ms"),
            leader_quota=self.replication_quotas.leader,
            fetch_purge_interval=config.get("fetch.purgatory.purge.interval.requests"),
            produce_purge_interval=config.get("producer.purgatory.purge.interval.requests"),
        )
        self.fetcher_manager = ReplicaFetcherManager.from_config(
            self.broker_id, self.replica_manager, self._replication_endpoint, config,
            quota=self.replication_quotas.follower)
        self.replica_manager.fetcher_manager = self.fetcher_manager
        self.replica_manager.startup()
        # -- admin (klog/daemon/admin.py): dynamic broker configs from the metastore, and in
        # cluster mode the /config/changes listener; before clients can connect.
        await self.admin.startup()
        # The log cleaner (klog/daemon/log_cleaner.py): after admin.startup, which gives the
        # logs found on disk their topics' configs, so that no log is compacted by the
        # broker's default cleanup.policy instead of its own.
        if config.log_cleaner_enable:
            self.log_cleaner = LogCleaner(self.log_manager,
                                          CleanerConfig.from_broker_config(config))
            self.log_manager.cleaner = self.log_cleaner
            self.log_cleaner.startup()
        # Groups: before the controller, whose LeaderAndIsr starts loading the offsets
        # partitions led here.
        self.group_manager.startup()
        self.group_coordinator.startup()
        self.server = Server(self, load_handlers())
        await self.server.start()
        await asyncio.to_thread(self._register_broker)
        # A new ZooKeeper session (after an expiry) has lost the ephemeral registration.
        self.metastore.add_session_listener(self._on_session_state)
        self.controller = Controller(self)
        await self.controller.startup()
        await self.server.serve()
        periodic = [
            (config.log_flush_scheduler_interval_ms, self._flush, "flush"),
            (config.log_retention_check_interval_ms, self._retention, "retention"),
            (config.log_flush_offset_checkpoint_interval_ms, self._checkpoint, "checkpoint"),
        ]
        # Kafka's "never" is Long.MAX_VALUE (log.flush.scheduler.interval.ms's default).
        self._tasks = [self.loop.create_task(self._every(ms, work, name))
                       for ms, work, name in periodic if ms < _NEVER_MS]
        self._tasks.append(self.loop.create_task(self._expire_producers()))
        log.info("klog broker %d started in %.2f s on %s (cluster %s)", self.broker_id,
                 time.monotonic() - self.started_at, self.bootstrap, cluster_id)

    def _open_metastore(self) -> MetadataStore:
        if self.config.zookeeper_connect:
            from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore

            return ZooKeeperMetadataStore(
                self.config.zookeeper_connect,
                session_timeout_ms=self.config.zookeeper_session_timeout_ms,
                connection_timeout_ms=self.config.zookeeper_connection_timeout_ms,
            )
        from klog.daemon.metastore.local import LocalMetadataStore

        return LocalMetadataStore(Path(self.config.log_dirs[0]) / METASTORE_DIR)

    def _settle_cluster_id(self) -> str:
        """The cluster id in the metastore, created on first start: the one stored in
        meta.properties if the log dirs have one (so a Kafka log dir keeps its id)."""
        store = self.metastore
        assert store is not None and self.log_manager is not None
        paths.create_persistent_paths(store)
        stored = [m.cluster_id for m in self.log_manager.read_meta_properties().values()
                  if m is not None and m.cluster_id]
        candidate = stored[0] if stored else (self.config.cluster_id or paths.new_cluster_id())
        try:
            store.create(paths.CLUSTER_ID, paths.encode_cluster_id(candidate),
                         make_parents=True)
            return candidate
        except NodeExistsError:
            data, _stat = store.get(paths.CLUSTER_ID)
            return paths.decode_cluster_id(data)

    def _register_broker(self) -> None:
        store = self.metastore
        assert store is not None
        endpoints = self.advertised_endpoints()
        payload = paths.BrokerRegistration(
            broker_id=self.broker_id,
            endpoints=tuple(paths.EndPoint(ep.listener_name, ep.host, ep.port,
                                           ep.security_protocol) for ep in endpoints),
            rack=self.config.broker_rack,
            timestamp_ms=int(time.time() * 1000),
        ).encode()
        path = paths.broker_path(self.broker_id)
        try:
            store.create(path, payload, ephemeral=True, make_parents=True)
        except NodeExistsError:
            raise RuntimeError(
                f"broker id {self.broker_id} is already registered at {path}: another broker "
                "with this broker.id is running"
            ) from None
        self.metadata_cache.brokers[self.broker_id] = BrokerInfo(
            self.broker_id, tuple(endpoints), self.config.broker_rack
        )
        stat = store.exists(path)
        if stat is not None:
            self.broker_epoch = stat.czxid

    def _on_session_state(self, state: str) -> None:
        # Called on the metastore's connection thread, where no metastore call may block:
        # re-register from a worker thread once a session follows a lost one.
        if state == "LOST":
            self._session_lost = True
        elif state == "CONNECTED" and self._session_lost and not self._shutting_down:
            self._session_lost = False
            loop = self.loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(
                    lambda: self._tasks.append(loop.create_task(self._reregister())))

    async def _reregister(self) -> None:
        store = self.metastore
        assert store is not None
        path = paths.broker_path(self.broker_id)
        try:
            await asyncio.to_thread(self._register_broker)
            log.info("registered again at %s after the ZooKeeper session expired", path)
            if self.controller is not None:
                self.controller.session_renewed()
        except RuntimeError:
            stat = await asyncio.to_thread(store.exists, path)
            if stat is None or stat.ephemeral_owner != store.session_id:
                log.error("cannot register again at %s: another broker holds broker id %d",
                          path, self.broker_id)
        except Exception:
            log.exception("registering again at %s failed", path)

    # -- controller requests (in-process in standalone mode) --------------------------------

    async def prepare_logs(self, states: Iterable[PartitionState]) -> None:
        """Before a LeaderAndIsr is applied: create the logs it will need here, off the
        event loop (klog/daemon/replica_manager.py ``create_logs``)."""
        assert self.replica_manager is not None
        mine = [s for s in states if self.broker_id in s.replicas]
        for topic in {s.topic for s in mine}:
            if topic not in self.topic_overrides:
                self.load_topic_overrides(topic)  # the log is made with the topic's configs
        await self.replica_manager.create_logs(mine)

    def apply_leader_and_isr(self, states: list[PartitionState],
                             topic_ids: dict[str, uuid.UUID]) -> dict[tuple[str, int], int]:
        """LeaderAndIsr: take the roles the controller decided (creating logs as needed)."""
        assert self.replica_manager is not None
        for topic in {s.topic for s in states}:
            if topic not in self.topic_overrides:
                self.load_topic_overrides(topic)
        errors = self.replica_manager.become_leader_or_follower(states)
        self.metadata_cache.topic_ids.update(topic_ids)
        self.group_manager.on_leader_and_isr(states, errors)
        return errors

    def apply_update_metadata(self, brokers: list[BrokerInfo], controller_id: int,
                              states: list[PartitionState],
                              topic_ids: dict[str, uuid.UUID]) -> None:
        self.metadata_cache.update_brokers(brokers, controller_id)
        self.metadata_cache.update_partitions(states, topic_ids)
        self.admin.metadata_updated()

    def apply_stop_replica(self, tps: list[tuple[str, int]], delete: bool) -> None:
        assert self.replica_manager is not None
        self.group_manager.on_stop_replica(tps)
        self.replica_manager.stop_replicas(tps, delete)

    def apply_topic_deletion(self, topic: str) -> None:
        self.metadata_cache.remove_topic(topic)
        self.topic_overrides.pop(topic, None)
        self.replication_quotas.remove_topic(topic)
        self.admin.metadata_updated()

    def load_topic_overrides(self, topic: str) -> dict[str, str]:
        """Read /config/topics/<topic> (empty when absent) into the overrides map."""
        store = self.metastore
        overrides: dict[str, str] = {}
        if store is not None:
            try:
                data, _ = store.get(paths.topic_config_path(topic))
                overrides = dict(paths.EntityConfig.decode(data).config)
            except NoNodeError:
                pass
        self.topic_overrides[topic] = overrides
        self.replication_quotas.apply_topic_config(topic, overrides)
        return overrides

    async def _replication_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) of ``broker_id`` on the inter-broker listener: from UpdateMetadata's
        broker list, else its /brokers/ids registration."""
        listener = self.config.inter_broker_listener_name
        info = self.metadata_cache.brokers.get(broker_id)
        if info is not None:
            ep = info.endpoint(listener) or (info.endpoints[0] if info.endpoints else None)
            if ep is not None:
                return ep.host or "127.0.0.1", ep.port
        store = self.metastore
        if store is None:
            return None
        try:
            data, _ = await asyncio.to_thread(store.get, paths.broker_path(broker_id))
        except (NoNodeError, MetastoreError):
            return None
        reg = paths.BrokerRegistration.decode(broker_id, data)
        for e in reg.endpoints:
            if e.listener_name == listener:
                return e.host or "127.0.0.1", e.port
        return (reg.endpoints[0].host or "127.0.0.1", reg.endpoints[0].port) \
            if reg.endpoints else None

    async def _every(self, interval_ms: int, work: Callable[[], Any], name: str) -> None:
        interval = max(interval_ms, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(work)
            except Exception:
                log.exception("periodic %s failed", name)

    async def _expire_producers(self) -> None:
        # Kafka's producer.id.expiration.check.interval.ms (an internal setting): every 10
        # minutes, forget producers idle longer than producer.id.expiration.ms. On the loop
        # thread, where appends run, so producer state is never touched concurrently.
        while True:
            await asyncio.sleep(PRODUCER_EXPIRATION_CHECK_MS / 1000)
            assert self.log_manager is not None
            now = int(time.time() * 1000)
            for plog in self.log_manager.all_logs().values():
                try:
                    plog.producer_state.remove_expired_producers(now)
                except Exception:
                    log.exception("expiring producers of %s failed", plog.dir.name)

    def _flush(self) -> None:
        assert self.log_manager is not None
        self.log_manager.flush_dirty_logs()

    def _retention(self) -> None:
        assert self.log_manager is not None
        self.log_manager.cleanup_logs()

    def _checkpoint(self) -> None:
        assert self.log_manager is not None
        self.log_manager.checkpoint_recovery_points_and_log_start_offsets()
        self.log_manager.checkpoint_high_watermarks()

    async def serve_forever(self, install_signals: bool = True) -> None:
        """Run until SIGTERM/SIGINT (or ``shutdown``), then shut down cleanly."""
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_shutdown)
        await self._stopped.wait()
        await self.shutdown()

    def request_shutdown(self) -> None:
        self._stopped.set()

    async def shutdown(self) -> None:
        if self._shutting_down:
            return
        self._shutting_down = True
        log.info("klog broker %d shutting down", self.broker_id)
        for task in self._tasks:
            task.cancel()
        # Cluster mode: hand leaderships over before the listeners close (Kafka's
        # controlled.shutdown.*); klog/daemon/controller/shutdown.py.
        if self.config.zookeeper_connect and self.controller is not None:
            from klog.daemon.controller.shutdown import controlled_shutdown

            await controlled_shutdown(self)
        if self.server is not None:
            await self.server.close()
        if self.controller is not None:
            await self.controller.shutdown()
        self.admin.shutdown()  # admin: stop applying config change notifications
        self.group_coordinator.shutdown()
        await self.group_manager.shutdown()
        if self.producer_ids is not None:  # no block claim may outlive the metastore
            await self.producer_ids.close()
        if self.fetcher_manager is not None:
            await self.fetcher_manager.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()  # its purgatories and timer too
        if self.log_cleaner is not None:  # stops at its next check; before the logs close
            await asyncio.to_thread(self.log_cleaner.shutdown)
        if self.log_manager is not None:
            await asyncio.to_thread(self._close_logs)
        if self.metastore is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.metastore.close)
        self._stopped.set()
        log.info("klog broker %d stopped", self.broker_id)

    def _close_logs(self) -> None:
        assert self.log_manager is not None
        self.log_manager.close()

