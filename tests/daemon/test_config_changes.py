"""ConfigChangeManager: what a dynamic config change sets off beyond the logs' configs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from klog.daemon.config import BrokerConfig
from klog.daemon.config.dynamic import DynamicBrokerConfig
from klog.daemon.config_changes import ConfigChangeManager
from klog.daemon.controller import Controller
from klog.daemon.metadata_cache import MetadataCache


def _manager(calls: list[Any]) -> tuple[ConfigChangeManager, DynamicBrokerConfig]:
    """A ConfigChangeManager over fakes, with a real Controller (for its reaction to the
    cluster-wide switch) whose elections only record what they were asked."""
    config = DynamicBrokerConfig(BrokerConfig.from_dict({
        "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": "/nonexistent"}))
    store: Any = None
    controller = Controller(1, config, store, MetadataCache(1), store, store, store)
    controller.unclean_enabled_changed = calls.append  # type: ignore[method-assign]
    topic_configs = SimpleNamespace(set=lambda *_: None)
    replica_manager = SimpleNamespace(partitions={}, update_topic_config=lambda _t: None)
    manager = ConfigChangeManager(1, config, store, topic_configs,  # type: ignore[arg-type]
                                  replica_manager, store, controller)  # type: ignore[arg-type]
    return manager, config


def test_unclean_election_turned_on_for_a_topic_tells_the_controller() -> None:
    calls: list[Any] = []
    manager, _config = _manager(calls)
    manager.apply_topic_overrides("t", {"retention.ms": "1000"})
    manager.apply_topic_overrides("t", {"unclean.leader.election.enable": "false"})
    assert calls == []
    manager.apply_topic_overrides("t", {"unclean.leader.election.enable": "True"})
    assert calls == [["t"]]


def test_unclean_election_turned_on_for_the_cluster_tells_the_controller() -> None:
    calls: list[Any] = []
    manager, config = _manager(calls)
    manager.apply_broker_configs({}, {"log.retention.ms": "1000"})
    assert calls == []
    manager.apply_broker_configs({}, {"unclean.leader.election.enable": "true"})
    assert calls == [None]  # every topic
    assert config.current.unclean_leader_election_enable
