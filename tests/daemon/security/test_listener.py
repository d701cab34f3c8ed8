"""A listener's security from its configs (klog/daemon/security/listener.py): what is
built for each protocol, the one-line refusals, and the broker's own inter-broker client
settings."""

from __future__ import annotations

from typing import Any

import pytest

from klog.daemon.config import BrokerConfig
from klog.daemon.security.listener import (
    ListenerConfigError,
    certificate_warning,
    inter_broker_client_security,
    listener_security,
)
from tests.daemon.security.certs import Pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret" '
        'user_alice="alice-secret";')


def config(pki: Pki, **settings: Any) -> BrokerConfig:
    return BrokerConfig.from_dict({
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.location": str(pki.ca_cert),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        **{k.replace("_", "."): v for k, v in settings.items()},
    })


def test_sasl_ssl_listener_and_inter_broker_client(pki: Pki) -> None:
    cfg = config(pki, **{"listener.name.internal.plain.sasl.jaas.config": JAAS,
                         "inter.broker.listener.name": "INTERNAL",
                         "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    internal = next(e for e in cfg.listeners if e.listener_name == "INTERNAL")
    security = listener_security(cfg, internal)
    assert security.ssl_context is not None and security.sasl is not None
    assert dict(security.sasl.plain_users) == {"broker": "broker-secret",
                                               "alice": "alice-secret"}
    client = inter_broker_client_security(cfg)
    assert client is not None and client.ssl_context is not None
    assert (client.mechanism, client.username, client.password) == (
        "PLAIN", "broker", "broker-secret")
    assert inter_broker_client_security(config(pki)) is None  # PLAINTEXT between brokers


@pytest.mark.parametrize("settings, message", [
    ({}, "plain.sasl.jaas.config"),  # PLAIN enabled without users
    ({"listener.name.internal.plain.sasl.jaas.config": "not jaas"}, "sasl.jaas.config"),
    ({"listener.name.internal.sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI"),
    ({"listener.name.internal.plain.sasl.jaas.config": JAAS,
      "listener.name.internal.ssl.keystore.location": "/nonexistent.pem"},
     "listener.name.internal.ssl.keystore.location"),
])
def test_listener_refusals_name_the_listener(pki: Pki, settings: dict[str, str],
                                             message: str) -> None:
    cfg = config(pki, **{k.replace(".", "_"): v for k, v in settings.items()})
    internal = next(e for e in cfg.listeners if e.listener_name == "INTERNAL")
    with pytest.raises(ListenerConfigError) as info:
        listener_security(cfg, internal)
    assert message in str(info.value) and "INTERNAL" in str(info.value)


def test_inter_broker_refusals(pki: Pki) -> None:
    no_password = JAAS.replace('password="broker-secret" ', "")
    cfg = config(pki, **{"listener.name.internal.plain.sasl.jaas.config": no_password,
                         "inter.broker.listener.name": "INTERNAL",
                         "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    with pytest.raises(ListenerConfigError, match="username and password"):
        inter_broker_client_security(cfg)
    cfg = config(pki, **{"listener.name.internal.plain.sasl.jaas.config": JAAS,
                         "inter.broker.listener.name": "INTERNAL"})  # GSSAPI by default
    with pytest.raises(ListenerConfigError, match="GSSAPI"):
        inter_broker_client_security(cfg)


def test_inter_broker_key_store_must_verify_with_its_trust_store(pki: Pki) -> None:
    """Kafka's SslFactory refuses to start such a listener: brokers connect to each other
    with these settings."""
    settings = {"listener.name.internal.plain.sasl.jaas.config": JAAS,
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "PLAIN"}
    for keystore, reason in ((pki.expired_server_keystore, "certificate has expired"),
                             (pki.rogue_server_keystore, "local issuer")):
        cfg = config(pki, **{k.replace(".", "_"): v for k, v in settings.items()},
                     ssl_keystore_location=str(keystore))
        internal = next(e for e in cfg.listeners if e.listener_name == "INTERNAL")
        with pytest.raises(ListenerConfigError, match=f"INTERNAL.*{reason}"):
            listener_security(cfg, internal)
        # the same key store on a listener brokers do not use: served, with a warning
        plain_cfg = config(pki, **{"listener.name.internal.plain.sasl.jaas.config": JAAS},
                           ssl_keystore_location=str(keystore))
        internal = next(e for e in plain_cfg.listeners if e.listener_name == "INTERNAL")
        listener_security(plain_cfg, internal)


def test_certificate_warning(pki: Pki) -> None:
    for keystore, expected in ((pki.server_keystore, None),
                               (pki.expired_server_keystore, "expired on"),
                               (pki.future_server_keystore, "is not valid until")):
        cfg = config(pki, ssl_keystore_location=str(keystore))
        internal = next(e for e in cfg.listeners if e.listener_name == "INTERNAL")
        plaintext = next(e for e in cfg.listeners if e.listener_name == "PLAINTEXT")
        assert certificate_warning(cfg, plaintext) is None
        warning = certificate_warning(cfg, internal)
        if expected is None:
            assert warning is None
        else:
            assert warning is not None and expected in warning
            assert warning.startswith("listener INTERNAL (SASL_SSL): the key store "
                                      "certificate CN=localhost ")
