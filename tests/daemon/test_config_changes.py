"""ConfigChangeManager: what a dynamic config change sets off beyond the logs' configs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from klog.daemon.config import BrokerConfig
from klog.daemon.config_changes import ConfigChangeManager


def _broker(calls: list[Any]) -> Any:
    return SimpleNamespace(
        topic_overrides={}, replica_manager=None,
        config=BrokerConfig.from_dict({"listeners": "PLAINTEXT://127.0.0.1:0",
                                       "log.dirs": "/nonexistent"}),
        replication_quotas=SimpleNamespace(apply_topic_config=lambda *_: None,
                                           apply_broker_config=lambda *_: None),
        controller=SimpleNamespace(unclean_enabled_changed=calls.append))


def test_unclean_election_turned_on_for_a_topic_tells_the_controller() -> None:
    calls: list[Any] = []
    manager = ConfigChangeManager(_broker(calls))
    manager.apply_topic_overrides("t", {"retention.ms": "1000"})
    manager.apply_topic_overrides("t", {"unclean.leader.election.enable": "false"})
    assert calls == []
    manager.apply_topic_overrides("t", {"unclean.leader.election.enable": "True"})
    assert calls == [["t"]]


def test_unclean_election_turned_on_for_the_cluster_tells_the_controller() -> None:
    calls: list[Any] = []
    broker = _broker(calls)
    manager = ConfigChangeManager(broker)
    manager.apply_broker_configs({}, {"log.retention.ms": "1000"})
    assert calls == []
    manager.apply_broker_configs({}, {"unclean.leader.election.enable": "true"})
    assert calls == [None]  # every topic
    assert broker.config.unclean_leader_election_enable
