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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from klog.client.security import ClientSecurity
from klog.daemon import descriptors
from klog.daemon.admin import AdminManager
from klog.daemon.config import BrokerConfig
from klog.daemon.config.dynamic import DynamicBrokerConfig
from klog.daemon.controller import Controller
from klog.daemon.controller.controller import ControllerCollector
from klog.daemon.controller.identity import ControllerIdentity
from klog.daemon.controller.receiver import ControlRequestReceiver
from klog.daemon.fetch_session import FetchSessionCache
from klog.daemon.group.coordinator import GroupCollector, GroupCoordinator
from klog.daemon.group.metadata_manager import GroupMetadataManager
from klog.daemon.handlers import BrokerServices
from klog.daemon.handlers.table import HANDLERS
from klog.daemon.log_cleaner import CleanerConfig, LogCleaner, LogCleanerCollector
from klog.daemon.log_dir_failure import LogDirFailureHandler
from klog.daemon.log_dir_mover import LogDirMover
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetadataStore, MetastoreError, NodeExistsError, NoNodeError
from klog.daemon.metrics import BrokerMetrics, unimplemented_configs
from klog.daemon.metrics.collectors import LogCollector
from klog.daemon.producer_ids import ProducerIdManager
from klog.daemon.quota_store import ClientQuotaAdmin, QuotaConfigLoader
from klog.daemon.quotas import QuotaManagers
from klog.daemon.replica_fetcher import FetcherLagCollector, ReplicaFetcherManager
from klog.daemon.replica_manager import MetastoreIsrStore, ReplicaManager
from klog.daemon.replica_metrics import ReplicaManagerCollector
from klog.daemon.replica_selector import selector_for
from klog.daemon.replication_quota import ReplicationQuotaManager, ReplicationQuotas
from klog.daemon.security.authorizer import AclAuthorizer
from klog.daemon.security.credentials import ScramCredentialCache, ScramCredentialManager
from klog.daemon.security.listener import ListenerConfigError, inter_broker_client_security
from klog.daemon.server import Server, SocketServerCollector, check_listeners
from klog.daemon.topic_configs import TopicConfigs
from klog.daemon.transaction.connections import BrokerConnections
from klog.daemon.transaction.coordinator import TransactionCoordinator
from klog.daemon.transaction.markers import MarkerWriter, TransactionMarkerChannelManager
from klog.daemon.transaction.state_manager import TransactionStateManager
from klog.daemon.transaction.verification import AddPartitionsToTxnManager
from klog.protocol import apis
from klog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

METASTORE_DIR = ".klog-metastore"
PRODUCER_EXPIRATION_CHECK_MS = 600_000
_NEVER_MS = 2**40  # ~35 years: anything longer is "never"


def _inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """The fetchers' TLS/SASL settings; a config error here is reported by ``start``
    (server.check_listeners names it in one line), so the constructor stays silent."""
    try:
        return inter_broker_client_security(config)
    except ListenerConfigError:
        return None


class Broker:
    """The assembly: builds every component with the collaborators it uses (the only module
    that knows them all), starts them in order and stops them in reverse."""

    def __init__(self, config: BrokerConfig) -> None:
        # Components are built here, none started: constructors touch no file, socket or
        # metastore (start() does, in order).
        self.dynamic_config = dynamic = DynamicBrokerConfig(config)
        self.broker_id = broker_id = config.broker_id
        self.metadata_cache = MetadataCache(broker_id)
        self.metastore = self._open_metastore()
        # Prometheus metrics (klog/daemon/metrics), served on metrics.http.listener; off by
        # default, and then no component is handed a counter.
        self.metrics = metrics = BrokerMetrics(config.get("metrics.http.listener"))
        counting = metrics if metrics.enabled else None
        # Replication throttles (klog/daemon/replication_quota.py), kept current by
        # dynamic broker configs and the topics' throttled-replica lists.
        self.replication_quotas = quotas = ReplicationQuotas.from_config(broker_id, config)
        dynamic.add_reconfigurable(lambda _old, new: quotas.apply_broker_config(new))
        self.topic_configs = TopicConfigs(dynamic, self.metastore)
        self.topic_configs.add_listener(quotas.apply_topic_config, quotas.remove_topic)
        self.log_manager = LogManager(
            config.log_dirs, config.log_config(), topic_config=self.topic_configs.log_config,
            producer_id_expiration_ms=config.get("producer.id.expiration.ms"),
        )
        # The replica manager owns produce and fetch, with their purgatories and timer.
        self.replica_manager = ReplicaManager(
            broker_id, self.log_manager, self.topic_configs.log_config,
            isr_store=MetastoreIsrStore(self.metastore),
            replica_lag_time_max_ms=config.get("replica.lag.time.max.ms"),
            leader_quota=quotas.leader,
            fetch_purge_interval=config.get("fetch.purgatory.purge.interval.requests"),
            produce_purge_interval=config.get("producer.purgatory.purge.interval.requests"),
            topic_metrics=counting.topics if counting else None,
            isr_metrics=counting.isr if counting else None,
        )
        self.fetcher_manager = ReplicaFetcherManager.from_config(
            broker_id, self.replica_manager, self._replication_endpoint, config,
            quota=quotas.follower, security=_inter_broker_security(config))
        self.replica_manager.fetcher_manager = self.fetcher_manager
        # KIP-392: replica.selector.class sends consumers with a client.rack to a replica
        # in their rack (klog/daemon/replica_selector.py).
        self.replica_manager.replica_selector = selector_for(
            config.replica_selector_class, self.metadata_cache)
        # Producer ids for InitProducerId (klog/daemon/producer_ids.py), claimed in blocks
        # from /latest_producer_id_block.
        self.producer_ids = ProducerIdManager(broker_id, self.metastore)
        # The log cleaner (klog/daemon/log_cleaner.py): compaction, told by the LogManager
        # of deletions, truncations and retention; its log.cleaner.* configs are dynamic.
        self.log_cleaner: LogCleaner | None = None
        if config.log_cleaner_enable:
            self.log_cleaner = cleaner = LogCleaner(
                self.log_manager, CleanerConfig.from_broker_config(config))
            self.log_manager.cleaner = cleaner
            dynamic.add_validator(lambda _old, new: cleaner.validate_reconfiguration(
                CleanerConfig.from_broker_config(new)))
            dynamic.add_reconfigurable(lambda _old, new: cleaner.reconfigure(
                CleanerConfig.from_broker_config(new)))
        # Moves between log dirs (AlterReplicaLogDirs, klog/daemon/log_dir_mover.py),
        # throttled by replica.alter.log.dirs.io.max.bytes.per.second (dynamic).
        self.log_dir_mover = mover = LogDirMover(
            self.replica_manager, self.log_manager,
            fetch_max_bytes=config.replica_fetch_max_bytes,
            quota=ReplicationQuotaManager(
                "AlterLogDirs", config.get("replica.alter.log.dirs.io.max.bytes.per.second")))
        self.replica_manager.log_dir_mover = mover
        # Failed log dirs (klog/daemon/log_dir_failure.py): an I/O error anywhere on a dir
        # takes it offline, its partitions' leadership moves, the other dirs go on.
        self.log_dir_failures = failures = LogDirFailureHandler(
            broker_id, self.log_manager, self.replica_manager, self.metastore,
            timeout_ms=config.get("log.dir.failure.timeout.ms"), moves=mover)
        self.log_manager.failure_listener = failures.report
        self.replica_manager.on_io_error = failures.report
        mover.offline_dirs = failures
        dynamic.add_reconfigurable(lambda _old, new: mover.update_quota(
            new.get("replica.alter.log.dirs.io.max.bytes.per.second")))
        # Who may send this broker control requests over the wire: the controller that
        # ZooKeeper names, nobody when standalone (klog/daemon/controller/identity.py).
        metastore = self.metastore
        self.controller_identity = ControllerIdentity(
            broker_id, bool(config.zookeeper_connect), lambda: metastore)
        # LeaderAndIsr / UpdateMetadata / StopReplica, from the wire or the controller here.
        self.control_requests = ControlRequestReceiver(
            broker_id, self.replica_manager, self.metadata_cache, self.topic_configs)
        self.controller = Controller(
            broker_id, dynamic, self.metastore, self.metadata_cache, self.controller_identity,
            self.control_requests, self.log_manager)
        self.admin = AdminManager(
            broker_id, dynamic, self.metastore, self.metadata_cache, self.replica_manager,
            self.log_manager, self.topic_configs, self.controller)
        # Consumer groups (klog/daemon/group/): offsets store and the group coordinator,
        # which sets its hooks on the manager before any partition can load.
        self.group_manager = GroupMetadataManager(
            broker_id, dynamic, self.metadata_cache, self.replica_manager, self.admin)
        self.group_coordinator = GroupCoordinator(dynamic, self.group_manager)
        self.control_requests.add_leadership_listener(self.group_manager)
        # SCRAM users: credentials cached for the SASL listeners, kept current by the
        # users/<name> config change notifications (klog/daemon/security/credentials.py).
        self.scram_cache = ScramCredentialCache(self.metastore)
        self.scram_credentials = ScramCredentialManager(self.metastore, self.scram_cache)
        self.admin.config_changes.add_user_listener(self.scram_cache.reload_user)
        # Client quotas (klog/daemon/quotas.py), kept current by the users/... and
        # clients/... change notifications (klog/daemon/quota_store.py).
        self.client_quotas = QuotaManagers.create(
            config.get("quota.window.num"), config.get("quota.window.size.seconds"),
            config.get("controller.quota.window.num"),
            config.get("controller.quota.window.size.seconds"))
        self.quota_loader = QuotaConfigLoader(self.metastore, self.client_quotas.configs)
        self.admin.config_changes.add_quota_listener(self.quota_loader.reload)
        self.client_quota_admin = ClientQuotaAdmin(self.metastore, self.client_quotas.configs)
        # Transactions (klog/daemon/transaction/): __transaction_state, the coordinator,
        # and the markers -- written in-process on partitions led here, with
        # WriteTxnMarkers to the other leaders.
        self.txn_state_manager = TransactionStateManager(
            broker_id, dynamic, self.metadata_cache, self.replica_manager, self.admin)
        self.txn_marker_writer = MarkerWriter(dynamic, self.replica_manager)
        # Transactional offset commits become visible (or are dropped) with the marker
        # written to their __consumer_offsets partition.
        self.txn_marker_writer.add_listener(self.group_manager.complete_transaction)
        self.txn_coordinator = TransactionCoordinator(
            broker_id, dynamic, self.txn_state_manager, self.producer_ids,
            TransactionMarkerChannelManager(broker_id, dynamic, self.metadata_cache,
                                            self.txn_marker_writer,
                                            self._replication_endpoint,
                                            _inter_broker_security(config)))
        self.control_requests.add_leadership_listener(self.txn_state_manager)
        # KIP-890: a transactional produce's partitions are confirmed by the coordinator
        # (in-process here, else AddPartitionsToTxn v4 on the inter-broker listener) before
        # the replica manager appends them.
        self.txn_verifier = AddPartitionsToTxnManager(
            broker_id, dynamic, self.metadata_cache, self.txn_coordinator,
            BrokerConnections(broker_id, "txn-verification", dynamic,
                              self._replication_endpoint, _inter_broker_security(config)))
        self.replica_manager.txn_verifier = self.txn_verifier
        dynamic.add_reconfigurable(self.txn_verifier.reconfigure)
        # ACLs (klog/daemon/security/authorizer.py) when authorizer.class.name asks for them.
        self.authorizer = AclAuthorizer.from_config(config, self.metastore)
        self.services = BrokerServices(
            broker_id=broker_id, config=dynamic, metadata_cache=self.metadata_cache,
            replica_manager=self.replica_manager, admin=self.admin,
            group_coordinator=self.group_coordinator, group_manager=self.group_manager,
            producer_ids=self.producer_ids, controller=self.controller,
            controller_identity=self.controller_identity,
            control_requests=self.control_requests,
            transaction_coordinator=self.txn_coordinator,
            txn_marker_writer=self.txn_marker_writer,
            authorizer=self.authorizer,
            # A standalone broker has no peer that could send it the inter-broker control
            # APIs (its controller calls it in-process): it neither announces nor accepts
            # them. In cluster mode they are served, to the controller only
            # (klog/daemon/controller/identity.py).
            api_versions=(apis.ADVERTISED if config.zookeeper_connect
                          else apis.STANDALONE_ADVERTISED),
            scram_credentials=self.scram_credentials,
            fetch_sessions=FetchSessionCache(config.max_incremental_fetch_session_cache_slots),
            quotas=self.client_quotas, client_quota_admin=self.client_quota_admin,
            log_dir_mover=self.log_dir_mover)
        self.server = Server(dynamic, HANDLERS, self.services, self.scram_cache,
                             request_metrics=counting.requests if counting else None)
        if counting:
            # Gauges read from the components' state at each scrape, on the event loop;
            # each component's collector is its own (beside it), the logs' is the metrics'.
            for collector in (
                ReplicaManagerCollector(self.replica_manager),
                ControllerCollector(self.controller),
                LogCollector(self.log_manager),
                FetcherLagCollector(self.fetcher_manager),
                GroupCollector(self.group_coordinator, self.group_manager),
                SocketServerCollector(self.server),
            ):
                counting.register(collector)
            if self.log_cleaner is not None:
                counting.register(LogCleanerCollector(
                    self.log_cleaner, lambda: int(time.time() * 1000)))
        self.started_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._shutting_down = False
        self._session_lost = False
        self._suspended = False  # the metastore connection dropped, the session may stand
        # What start() reached, so that shutdown after a failed start closes only that.
        self._started: set[str] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def config(self) -> BrokerConfig:
        """The broker's config now (its dynamic layers included)."""
        return self.dynamic_config.current

    # -- configuration helpers -------------------------------------------------------------

    @property
    def bound_port(self) -> int:
        """The port of the first listener (useful when it was configured as 0)."""
        return next(iter(self.server.bound.values()))[1]

    @property
    def bootstrap(self) -> str:
        host = self.advertised_endpoints()[0].host
        return f"{host}:{self.bound_port}"

    def advertised_endpoints(self) -> list[BrokerEndpoint]:
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
        # Refuse listeners klog cannot serve (key stores, SASL mechanisms, JAAS) before any
        # work is done.
        check_listeners(config, self.scram_cache)
        unimplemented = unimplemented_configs(config)
        if unimplemented:
            log.warning("accepted, not implemented: %s (klog's metrics are served in "
                        "Prometheus' format on metrics.http.listener)",
                        ", ".join(unimplemented))
        self._started.add("metrics")
        self.metrics.start()  # first: a port in use fails the start before any work
        # Refuse now, clearly, what would fail half way through loading the logs.
        await asyncio.to_thread(descriptors.check_log_dirs, config.log_dirs)
        self._started.add("logs")
        await asyncio.to_thread(self.log_manager.startup)
        for summary in self.log_manager.load_summaries:
            for skipped in summary.skipped:
                log.warning("ignored in %s: %s", summary.log_dir, skipped)
        self._started.add("metastore")
        await asyncio.to_thread(self.metastore.start)
        cluster_id = await asyncio.to_thread(self._settle_cluster_id)
        self.metadata_cache.cluster_id = cluster_id
        await asyncio.to_thread(self.log_manager.ensure_meta_properties, self.broker_id,
                                cluster_id)
        # The first producer id block is claimed in the background (the persistent paths
        # it lives under were created above).
        self.producer_ids.start()
        self.replica_manager.startup()
        self.log_dir_mover.startup()
        self.log_dir_failures.startup()
        # -- admin (klog/daemon/admin.py): dynamic broker configs from the metastore, and in
        # cluster mode the /config/changes listener; before clients can connect.
        await self.admin.startup()
        # Honest configuration: every name set (file, overrides, dynamic) that klog knows
        # but does not act on, in one line, never taken in silence.
        unimplemented = self.dynamic_config.current.unimplemented_keys
        if unimplemented:
            log.warning("accepted, not implemented: %s", ", ".join(unimplemented))
        await self.scram_cache.load()
        await self.quota_loader.load()
        # After admin.startup, which gives the logs found on disk their topics' configs: no
        # log is compacted by the broker's default cleanup.policy instead of its own.
        if self.log_cleaner is not None:
            self.log_cleaner.startup()
        # ACLs loaded (and, in cluster mode, watched) before any client can connect.
        if self.authorizer is not None:
            await self.authorizer.startup()
        # Groups: before the controller, whose LeaderAndIsr starts loading the offsets
        # partitions led here.
        self.group_manager.startup()
        self.group_coordinator.startup()
        # Transactions: after the groups (markers complete transactional offset commits),
        # before the controller loads the __transaction_state partitions led here.
        self.txn_state_manager.startup()
        self.txn_coordinator.startup()
        # Listening before registering (Kafka's order): the controller, told of this
        # broker by ZooKeeper, connects at once and its UpdateMetadata waits in the
        # backlog until ``serve`` -- never a refused connect and a retry later, while
        # clients already ask this broker for metadata.
        await self.server.start()
        await asyncio.to_thread(self._register_broker)
        # A new ZooKeeper session (after an expiry) has lost the ephemeral registration.
        self.metastore.add_session_listener(self._on_session_state)
        self._started.add("controller")
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
            self.control_requests.broker_epoch = stat.czxid

    def _on_session_state(self, state: str) -> None:
        # Called on the metastore's connection thread, where no metastore call may block:
        # re-register from a worker thread once a session follows a lost one.
        if state == "LOST":
            self._session_lost = True
        elif state == "SUSPENDED":
            self._suspended = True
        elif state == "CONNECTED" and self._session_lost and not self._shutting_down:
            self._session_lost = self._suspended = False
            loop = self.loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(
                    lambda: self._tasks.append(loop.create_task(self._reregister())))
        elif state == "CONNECTED" and self._suspended and not self._shutting_down:
            # The same session: registrations stand, but the watches went with the
            # connection; the controller sets its own again.
            self._suspended = False
            running = self.loop
            if running is not None and not running.is_closed():
                running.call_soon_threadsafe(self.controller.connection_restored)

    async def _reregister(self) -> None:
        store = self.metastore
        path = paths.broker_path(self.broker_id)
        try:
            await asyncio.to_thread(self._register_broker)
            log.info("registered again at %s after the ZooKeeper session expired", path)
            self.controller.session_renewed()
        except RuntimeError:
            stat = await asyncio.to_thread(store.exists, path)
            if stat is None or stat.ephemeral_owner != store.session_id:
                log.error("cannot register again at %s: another broker holds broker id %d",
                          path, self.broker_id)
        except Exception:
            log.exception("registering again at %s failed", path)

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
            now = int(time.time() * 1000)
            for plog in self.log_manager.all_logs().values():
                try:
                    plog.producer_state.remove_expired_producers(now)
                except Exception:
                    log.exception("expiring producers of %s failed", plog.dir.name)

    def _flush(self) -> None:
        self.log_manager.flush_dirty_logs()

    def _retention(self) -> None:
        self.log_manager.cleanup_logs()

    def _checkpoint(self) -> None:
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
        if self.config.zookeeper_connect and "controller" in self._started:
            from klog.daemon.controller.shutdown import controlled_shutdown

            await controlled_shutdown(self.config, self.broker_id,
                                      self.control_requests.broker_epoch, self.controller,
                                      self.metadata_cache)
        await self.server.close()
        await self.controller.shutdown()
        self.admin.shutdown()  # admin: stop applying config change notifications
        if self.authorizer is not None:
            self.authorizer.shutdown()  # and ACL change notifications
        self.group_coordinator.shutdown()
        await self.group_manager.shutdown()
        await self.txn_verifier.shutdown()
        await self.txn_coordinator.shutdown()
        await self.txn_state_manager.shutdown()
        await self.producer_ids.close()  # no block claim may outlive the metastore
        await self.fetcher_manager.shutdown()
        await self.log_dir_mover.shutdown()  # a copy step in flight ends first
        await self.log_dir_failures.shutdown()
        self.replica_manager.shutdown()  # its purgatories and timer too
        if self.log_cleaner is not None:  # stops at its next check; before the logs close
            await asyncio.to_thread(self.log_cleaner.shutdown)
        if "logs" in self._started:
            await asyncio.to_thread(self.log_manager.close)
        if "metastore" in self._started:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.metastore.close)
        if "metrics" in self._started:
            await asyncio.to_thread(self.metrics.close)
        self._stopped.set()
        log.info("klog broker %d stopped", self.broker_id)
