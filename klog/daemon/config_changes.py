"""Dynamic configs in the metastore: writing them, loading them, and hearing about changes.

Kafka's ZooKeeper-mode protocol, which klog follows in both modes:

- whoever changes an entity's config (AlterConfigs on any broker, or a tool) overwrites
  ``/config/<type>/<name>`` with the complete override set, then creates a sequential
  ``/config/changes/config_change_<seq>`` naming the entity (``topics/t``, ``brokers/0``,
  ``brokers/<default>``);
- every broker watches ``/config/changes``, applies the entities named by notifications
  newer than the last one it processed (re-reading the entity's znode, so the payload of a
  notification is only a pointer), and deletes notifications older than 15 minutes
  (Kafka's ``changeExpirationMs``).

``ConfigChangeManager`` is the broker's side: at start-up it loads this broker's dynamic
configs (``/config/brokers/<id>`` and ``/config/brokers/<default>``) into a new
BrokerConfig; in cluster mode it then listens for notifications. Standalone mode has no
other writer, so the AdminManager applies its own changes directly (``apply_topic`` /
``reload_broker_configs``) and no watch is kept. Applying a topic change re-reads
``/config/topics/<t>`` into the broker's TopicConfigs (klog/daemon/topic_configs.py) and
pushes the new LogConfig to the partition logs this broker hosts; a user change
(``users/<name>``: SCRAM credentials) goes to the user listeners (the credential cache);
a user, user/client or client change (``users/<u>``, ``users/<u>/clients/<c>``,
``clients/<c>``: client quotas) goes to the quota listeners (klog/daemon/quota_store.py);
applying a broker change
makes a new current config (``DynamicBrokerConfig.update``) and pushes the new log defaults
to every hosted log. The replication throttles (klog/daemon/replication_quota.py: the
*.replication.throttled.rate configs and the topics' *.replication.throttled.replicas
lists) hear of both as listeners of those two.

Runs on the event loop; metastore calls go to worker threads; watch callbacks (the store's
thread) only schedule work on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from klog.daemon.config import ConfigError
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetadataStore, NoNodeError
from klog.daemon.metastore.change_listener import (
    CHANGE_EXPIRATION_MS,
    ChangeNotificationListener,
    purge_obsolete,
    write_then_notify,
)

if TYPE_CHECKING:
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.replica_manager import ReplicaManager
    from klog.daemon.topic_configs import TopicConfigs
    from klog.storage.log_manager import LogManager

log = logging.getLogger(__name__)



# -- the metastore side (blocking; call from worker threads) -------------------------------


UNCLEAN_ELECTION = "unclean.leader.election.enable"


def _is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def read_entity_config(store: MetadataStore, entity_type: str, entity_name: str
                       ) -> dict[str, str]:
    """The overrides stored for one entity (empty when the znode is absent)."""
    try:
        data, _stat = store.get(paths.config_path(entity_type, entity_name))
    except NoNodeError:
        return {}
    return dict(paths.EntityConfig.decode(data).config)


def write_entity_config(store: MetadataStore, entity_type: str, entity_name: str,
                        config: Mapping[str, str]) -> str:
    """Replace an entity's overrides and announce the change; returns the notification's
    path. The config is written first, so a broker that hears of the change reads the new
    overrides (Kafka's AdminZkClient.changeEntityConfig order)."""
    return write_then_notify(
        store, paths.config_path(entity_type, entity_name),
        paths.EntityConfig(config=dict(config)).encode(), paths.config_change_path(),
        paths.ConfigChangeNotification(f"{entity_type}/{entity_name}").encode())


def purge_obsolete_notifications(store: MetadataStore, now_ms: int | None = None,
                                 expiration_ms: int = CHANGE_EXPIRATION_MS) -> int:
    """Delete notifications created more than ``expiration_ms`` ago; returns how many."""
    return purge_obsolete(store, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX, now_ms,
                          expiration_ms)


# -- the broker side -------------------------------------------------------------------------


class UncleanElectionSwitch(Protocol):
    """Told when unclean.leader.election.enable may have been turned on for ``topics``
    (the controller, klog/daemon/controller/controller.py)."""

    def unclean_enabled_changed(self, topics: Iterable[str] | None) -> None: ...


class ConfigChangeManager:
    """Loads and applies dynamic configs for one broker (see the module docstring)."""

    def __init__(self, broker_id: int, config: DynamicBrokerConfig, metastore: MetadataStore,
                 topic_configs: TopicConfigs, replica_manager: ReplicaManager,
                 log_manager: LogManager, controller: UncleanElectionSwitch) -> None:
        self.broker_id = broker_id
        self.config = config
        self.store = metastore
        self.topic_configs = topic_configs
        self.replica_manager = replica_manager
        self.log_manager = log_manager
        self.controller = controller
        # The notifications' listener (cluster mode only).
        self._listener: ChangeNotificationListener | None = None
        self._started = False  # start-up's own load is reported by Broker.startup
        # Told the (desanitized) name of a user entity that changed (/config/users: SCRAM
        # credentials, klog/daemon/security/credentials.py).
        self._user_listeners: list[Callable[[str], Awaitable[None]]] = []
        # Told (entity type, raw entity name) of a users/... or clients/... change: the
        # client quotas (klog/daemon/quota_store.py), which also live in user entities.
        self._quota_listeners: list[Callable[[str, str], Awaitable[None]]] = []

    def add_user_listener(self, listener: Callable[[str], Awaitable[None]]) -> None:
        self._user_listeners.append(listener)

    def add_quota_listener(self, listener: Callable[[str, str], Awaitable[None]]) -> None:
        self._quota_listeners.append(listener)

    async def startup(self) -> None:
        """Load this broker's dynamic configs; in cluster mode, start listening first so a
        change written while loading is not missed."""
        if not self.config.current.standalone:
            self._listener = ChangeNotificationListener(
                self.store, paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX, "config",
                self._handle, data_error=paths.ZNodeDataError)
            # Everything up to now is read below and on demand, as the changes say.
            await self._listener.start()
        await self.reload_broker_configs()
        self._started = True
        await self._load_local_topic_configs()

    async def _load_local_topic_configs(self) -> None:
        """The logs found on disk were opened with the broker's static defaults (the
        metastore was not open yet): give them their topics' overrides and the dynamic
        broker defaults now, as Kafka's LogManager reads topic configs before loading."""
        logs = self.log_manager.all_logs()
        topics = sorted({t for t, _p in logs})
        store = self.store
        overrides = await asyncio.to_thread(lambda: {
            t: read_entity_config(store, paths.CONFIG_TYPE_TOPIC, t) for t in topics})
        for topic, config in overrides.items():
            self.topic_configs.set(topic, config)
        for (topic, _p), plog in logs.items():
            try:
                plog.update_config(self.topic_configs.log_config(topic))
            except ConfigError as exc:
                log.warning("cannot apply the config of topic %s: %s", topic, exc)

    @property
    def last_executed_change(self) -> int:
        """The sequence of the last notification processed (-1: none, or standalone)."""
        return -1 if self._listener is None else self._listener.last_executed_change

    def shutdown(self) -> None:
        if self._listener is not None:
            self._listener.close()

    # -- applying ------------------------------------------------------------------------

    async def apply_topic(self, topic: str) -> None:
        """Re-read a topic's overrides and give its hosted logs the new config."""
        overrides = await asyncio.to_thread(read_entity_config, self.store,
                                            paths.CONFIG_TYPE_TOPIC, topic)
        self.apply_topic_overrides(topic, overrides)

    def apply_topic_overrides(self, topic: str, overrides: Mapping[str, str]) -> None:
        self.topic_configs.set(topic, overrides)
        if _is_true(overrides.get(UNCLEAN_ELECTION)):
            self.controller.unclean_enabled_changed([topic])
        try:
            self.replica_manager.update_topic_config(topic)
        except ConfigError as exc:  # written by a tool that skipped validation
            log.warning("cannot apply the config of topic %s: %s", topic, exc)

    async def reload_broker_configs(self) -> None:
        """Rebuild the broker's config from its dynamic layers in the metastore and push the
        new log defaults to every hosted log."""
        store = self.store
        broker_id = str(self.broker_id)
        per_broker, default = await asyncio.to_thread(lambda: (
            read_entity_config(store, paths.CONFIG_TYPE_BROKER, broker_id),
            read_entity_config(store, paths.CONFIG_TYPE_BROKER, paths.DEFAULT_ENTITY),
        ))
        self.apply_broker_configs(per_broker, default)

    def apply_broker_configs(self, per_broker: Mapping[str, str],
                             default: Mapping[str, str]) -> None:
        current = self.config.current
        if (per_broker == current.dynamic_broker_configs
                and default == current.dynamic_default_configs):
            # Set again unchanged: files named by the config may have been rewritten.
            self.config.reload_updated_files()
            return
        try:
            new = current.with_dynamic(per_broker, default, lenient=True)
        except ConfigError as exc:
            log.warning("ignored dynamic broker configs: %s", exc)
            return
        for key, reason in new.ignored_dynamic.items():
            log.warning("ignored dynamic broker config %s: %s", key, reason)
        added = sorted(set(new.unimplemented_keys) - set(current.unimplemented_keys))
        if added and self._started:  # as at start-up: known to Kafka and klog, not acted on by klog
            log.warning("accepted, not implemented: %s", ", ".join(added))
        # The reconfigurables (replication quotas, the controller's unclean switch, ...)
        # hear of it from the DynamicBrokerConfig.
        self.config.update(new)
        rm = self.replica_manager
        for topic in sorted({t for t, _p in rm.partitions}):
            try:
                rm.update_topic_config(topic)
            except ConfigError as exc:
                log.warning("cannot apply the config of topic %s: %s", topic, exc)

    # -- listening (cluster mode) --------------------------------------------------------

    async def _handle(self, child: str, data: bytes) -> None:
        await self._apply(paths.ConfigChangeNotification.decode(data))

    async def _apply(self, note: paths.ConfigChangeNotification) -> None:
        kind, name = note.entity_type, note.entity_name
        if kind == paths.CONFIG_TYPE_TOPIC:
            # Hosted or known topics only; others read their overrides when they arrive.
            hosted = any(t == name for t, _p in self.replica_manager.partitions)
            if hosted or name in self.topic_configs:
                await self.apply_topic(name)
        elif kind == paths.CONFIG_TYPE_BROKER and name in (paths.DEFAULT_ENTITY,
                                                           str(self.broker_id)):
            await self.reload_broker_configs()
        elif kind in (paths.CONFIG_TYPE_USER, paths.CONFIG_TYPE_CLIENT):
            if kind == paths.CONFIG_TYPE_USER and "/" not in name:
                user = urllib.parse.unquote(name)  # sanitized as Kafka's Sanitizer does
                for listener in self._user_listeners:
                    await listener(user)
            # users/<u>, users/<u>/clients/<c>, clients/<c>: quota entities.
            for quota_listener in self._quota_listeners:
                await quota_listener(kind, name)
