"""klog/client/properties.py: Kafka property names to the clients' keywords, security
settings included (what --producer.config / --consumer.config files hold)."""

from __future__ import annotations

import pytest

from klog.client.consumer import consumer_config
from klog.client.producer import producer_config
from klog.client.security import ClientSecurity

SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob", "sasl.password": "bob-secret"}


def test_security_settings_become_one_client_security() -> None:
    config = producer_config({**SASL, "acks": "all", "linger.ms": "10"})
    assert config["acks"] == -1 and config["linger_ms"] == 10
    security = config["security"]
    assert isinstance(security, ClientSecurity)
    assert (security.protocol, security.mechanism, security.username) == \
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob")
    consumer = consumer_config({**SASL, "group.id": "g"})
    assert consumer["group_id"] == "g" and consumer["security"].uses_sasl


def test_without_security_settings_there_is_no_security_keyword() -> None:
    assert "security" not in producer_config({"acks": "1"})


@pytest.mark.parametrize("settings, message", [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI"),
    ({"security.protocol": "NOPE"}, "security.protocol"),
    ({"sasl.kerberos.service.name": "kafka"}, "unknown producer property"),
])
def test_unusable_security_settings_name_themselves(settings: dict[str, str],
                                                    message: str) -> None:
    with pytest.raises(ValueError, match=message):
        producer_config(settings)
