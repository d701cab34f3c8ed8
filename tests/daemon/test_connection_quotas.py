"""Tests for klog.daemon.connection_quotas: the limits' arithmetic, with a fake clock
(the listeners' behaviour under them is tested in test_server.py)."""

from __future__ import annotations

import math

from klog.daemon.config import BrokerConfig
from klog.daemon.connection_quotas import ConnectionQuotas, normalize_address


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _config(**settings: object) -> BrokerConfig:
    return BrokerConfig.from_dict({"listeners": "PLAINTEXT://127.0.0.1:0",
                                   **{k: str(v) for k, v in settings.items()}})


def test_defaults_limit_nothing() -> None:
    quotas = ConnectionQuotas(_config())
    for _ in range(1000):
        assert quotas.slot_wait("PLAINTEXT") == 0
        assert quotas.inc("PLAINTEXT", "10.0.0.1") is None
    assert quotas.total == 1000 and quotas.per_ip == {"10.0.0.1": 1000}


def test_max_connections_waits_for_a_close() -> None:
    quotas = ConnectionQuotas(_config(**{"max.connections": 2}))
    quotas.inc("PLAINTEXT", "a")
    quotas.inc("PLAINTEXT", "b")
    assert quotas.slot_wait("PLAINTEXT") == math.inf
    quotas.dec("PLAINTEXT", "a")
    assert quotas.slot_wait("PLAINTEXT") == 0


def test_per_ip_limit_and_overrides() -> None:
    quotas = ConnectionQuotas(_config(**{
        "max.connections.per.ip": 1,
        "max.connections.per.ip.overrides": "10.0.0.2:3,::ffff:10.0.0.3:0,localhost:2"}))
    assert quotas.inc("PLAINTEXT", "10.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "10.0.0.1") == 1  # over: not counted
    assert quotas.per_ip["10.0.0.1"] == 1 and quotas.total == 1
    assert [quotas.inc("PLAINTEXT", "10.0.0.2") for _ in range(4)] == [None, None, None, 3]
    assert quotas.inc("PLAINTEXT", "10.0.0.3") == 0  # a mapped address is the IPv4 one
    assert quotas.inc("PLAINTEXT", "127.0.0.1") is None  # localhost resolved
    assert quotas.inc("PLAINTEXT", "127.0.0.1") is None
    assert quotas.inc("PLAINTEXT", "127.0.0.1") == 2


def test_creation_rate_is_a_one_second_bucket() -> None:
    clock = Clock()
    quotas = ConnectionQuotas(_config(**{"max.connection.creation.rate": 4}), clock=clock)
    for _ in range(4):
        assert quotas.slot_wait("PLAINTEXT") == 0
        quotas.inc("PLAINTEXT", "a")
    assert quotas.slot_wait("PLAINTEXT") == 0.25
    clock.now += 0.25
    assert quotas.slot_wait("PLAINTEXT") == 0


def test_the_inter_broker_listener_is_protected_from_broker_wide_limits() -> None:
    config = _config(**{
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "max.connections": 1,
        "listener.name.internal.max.connections": 2,
    })
    quotas = ConnectionQuotas(config)
    quotas.inc("PLAINTEXT", "a")
    assert quotas.slot_wait("PLAINTEXT") == math.inf
    assert quotas.slot_wait("INTERNAL") == 0
    quotas.inc("INTERNAL", "b")
    assert quotas.max_connections_exceeded()
    quotas.inc("INTERNAL", "c")
    assert quotas.slot_wait("INTERNAL") == math.inf  # its own listener limit still holds


def test_a_listener_limit_defaults_to_the_broker_wide_one() -> None:
    # as Kafka's valuesWithPrefixOverride: the one listener is held at max.connections
    config = _config(**{"max.connections": 1})
    quotas = ConnectionQuotas(config)
    assert quotas.limits.listener_max == {"PLAINTEXT": 1}


def test_a_changed_config_applies_and_keeps_the_counts() -> None:
    quotas = ConnectionQuotas(_config(**{"max.connections": 1}))
    quotas.inc("PLAINTEXT", "a")
    assert quotas.slot_wait("PLAINTEXT") == math.inf
    quotas.configure(_config(**{"max.connections": 5}))
    assert quotas.slot_wait("PLAINTEXT") == 0 and quotas.total == 1


def test_normalize_address() -> None:
    assert normalize_address("::ffff:127.0.0.1") == "127.0.0.1"
    assert normalize_address("0:0::1") == "::1"
    assert normalize_address("fe80::1%eth0") == "fe80::1"
    assert normalize_address("not-an-address") == "not-an-address"
