"""Topic config overrides known to this broker, and the LogConfig each topic's logs get.

Owns the map topic -> overrides (``/config/topics/<topic>`` in the metastore) for the topics
this broker hosts or has heard of, and the one rule for a topic's log config: the broker's
current defaults (``log.*``, dynamic layers included) with the topic's overrides on top
(``BrokerConfig.log_config``). The replica manager and the log manager ask it for a
topic's LogConfig; the config-change manager and the control-request receiver keep it
current. Listeners hear of every topic whose overrides were set (the replication throttles'
replica lists, the controller's unclean-election switch).

Runs on the event loop thread, except ``load``, whose metastore read may be made from a
worker thread before the logs it configures exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from klog.daemon.config.dynamic import DynamicBrokerConfig
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetadataStore, NoNodeError
from klog.storage.config import LogConfig

TopicConfigListener = Callable[[str, Mapping[str, str]], None]


class TopicConfigs:
    def __init__(self, config: DynamicBrokerConfig, metastore: MetadataStore) -> None:
        self.config = config
        self.metastore = metastore
        self._overrides: dict[str, dict[str, str]] = {}
        self._listeners: list[TopicConfigListener] = []
        self._removal_listeners: list[Callable[[str], None]] = []

    def add_listener(self, on_set: TopicConfigListener,
                     on_removed: Callable[[str], None] | None = None) -> None:
        self._listeners.append(on_set)
        if on_removed is not None:
            self._removal_listeners.append(on_removed)

    def __contains__(self, topic: object) -> bool:
        return topic in self._overrides

    def overrides(self, topic: str) -> dict[str, str]:
        """The topic's overrides as last read ({} when none, or not read yet)."""
        return dict(self._overrides.get(topic, {}))

    def log_config(self, topic: str) -> LogConfig:
        return self.config.current.log_config(self._overrides.get(topic))

    def set(self, topic: str, overrides: Mapping[str, str]) -> None:
        self._overrides[topic] = dict(overrides)
        for listener in self._listeners:
            listener(topic, overrides)

    def load(self, topic: str) -> dict[str, str]:
        """Read /config/topics/<topic> (empty when absent) and make it the topic's overrides."""
        overrides: dict[str, str] = {}
        try:
            data, _ = self.metastore.get(paths.topic_config_path(topic))
            overrides = dict(paths.EntityConfig.decode(data).config)
        except NoNodeError:
            pass
        self.set(topic, overrides)
        return overrides

    def load_missing(self, topics: Iterable[str]) -> None:
        """Load the overrides of those ``topics`` not known yet (a log is made with its
        topic's configs)."""
        for topic in topics:
            if topic not in self._overrides:
                self.load(topic)

    def remove(self, topic: str) -> None:
        """The topic is deleted: forget its overrides."""
        self._overrides.pop(topic, None)
        for listener in self._removal_listeners:
            listener(topic)
