"""Real clients over TLS and SASL: confluent-kafka (librdkafka) and kafka-python against
SSL with a client certificate, SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
(users created through confluent-kafka's AlterUserScramCredentials), aiokafka over
SASL_SSL, re-authentication, wrong passwords and a missing client certificate; failed
authentications and handshakes give their connection slots back (max.connections.per.ip)."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.daemon.security.certs import Pki
from tests.daemon.wire import InProcessBroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="alice-secret";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path_factory.mktemp("sec"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": "2000",
    }).start()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port(running, 'PLAINTEXT')}"})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(mechanism, 4096),
                                     b"bob-secret")
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)])
    for future in futures.values():
        future.result(timeout=30)
    try:
        yield running
    finally:
        running.stop()


def port(broker: InProcessBroker, listener: str) -> int:
    return broker.broker.server.bound[listener][1]


def confluent_settings(broker: InProcessBroker, pki: Pki, kind: str) -> dict[str, Any]:
    if kind == "SSL":
        return {"bootstrap.servers": f"127.0.0.1:{port(broker, 'SSL')}",
                "security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert),
                "ssl.certificate.location": str(pki.client_cert),
                "ssl.key.location": str(pki.client_key)}
    user, password = ("alice", "alice-secret") if kind == "PLAIN" else ("bob", "bob-secret")
    return {"bootstrap.servers": f"127.0.0.1:{port(broker, 'SASL_SSL')}",
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca_cert),
            "sasl.mechanism": kind, "sasl.username": user, "sasl.password": password}


KINDS = ["SSL", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.mark.parametrize("kind", KINDS)
def test_confluent_kafka_produces_and_consumes(broker: InProcessBroker, pki: Pki,
                                               kind: str) -> None:
    settings = confluent_settings(broker, pki, kind)
    topic = f"ck-{kind.lower()}"
    producer = ck.Producer({**settings, "message.timeout.ms": 20000})
    for i in range(20):
        producer.produce(topic, f"v{i}".encode() * 1000)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**settings, "group.id": f"g-{kind}",
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [f"v{i}".encode() * 1000 for i in range(20)]


def test_confluent_kafka_oauthbearer_unsecured_token(broker: InProcessBroker, pki: Pki,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="klog.daemon.pipeline")
    producer = ck.Producer({
        "bootstrap.servers": f"127.0.0.1:{port(broker, 'SASL_SSL')}",
        "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca_cert),
        "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=carol", "message.timeout.ms": 20000})
    producer.produce("ck-oauth", b"token")
    assert producer.flush(30) == 0
    assert "authenticated as User:carol" in caplog.text


def test_confluent_kafka_reauthenticates_past_the_session_lifetime(
        broker: InProcessBroker, pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="klog.daemon.pipeline")
    settings = confluent_settings(broker, pki, "SCRAM-SHA-512")
    producer = ck.Producer({**settings, "message.timeout.ms": 20000})
    producer.produce("ck-reauth", b"before")
    assert producer.flush(30) == 0
    before = caplog.text.count("authenticated as User:bob")
    time.sleep(2.5)  # past connections.max.reauth.ms: librdkafka re-authenticates
    producer.produce("ck-reauth", b"after")
    assert producer.flush(30) == 0  # the connection was not closed as expired
    assert caplog.text.count("authenticated as User:bob") > before


def test_confluent_kafka_wrong_password_is_an_authentication_error(
        broker: InProcessBroker, pki: Pki) -> None:
    errors: list[ck.KafkaError] = []
    settings = {**confluent_settings(broker, pki, "SCRAM-SHA-256"), "sasl.password": "nope",
                "error_cb": errors.append}
    producer = ck.Producer(settings)
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION
    assert "invalid credentials" in errors[0].str()


@pytest.mark.parametrize("kind", KINDS)
def test_kafka_python_produces_and_consumes(broker: InProcessBroker, pki: Pki,
                                            kind: str) -> None:
    if kind == "SSL":
        settings: dict[str, Any] = {
            "bootstrap_servers": f"127.0.0.1:{port(broker, 'SSL')}",
            "security_protocol": "SSL", "ssl_cafile": str(pki.ca_cert),
            "ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key)}
    else:
        user, password = ("alice", "alice-secret") if kind == "PLAIN" else ("bob", "bob-secret")
        settings = {"bootstrap_servers": f"127.0.0.1:{port(broker, 'SASL_SSL')}",
                    "security_protocol": "SASL_SSL", "ssl_cafile": str(pki.ca_cert),
                    "sasl_mechanism": kind, "sasl_plain_username": user,
                    "sasl_plain_password": password}
    topic = f"kp-{kind.lower()}"
    producer = KafkaProducer(**settings)
    for i in range(10):
        producer.send(topic, f"v{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             **settings)
    # range first: zip stops before asking the consumer for an 11th record
    values = [m.value for _, m in zip(range(10), consumer, strict=False)]
    consumer.close()
    assert values == [f"v{i}".encode() for i in range(10)]


def test_kafka_python_wrong_password_fails(broker: InProcessBroker, pki: Pki,
                                          caplog: pytest.LogCaptureFixture) -> None:
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port(broker, 'SASL_SSL')}",
                             security_protocol="SASL_SSL", ssl_cafile=str(pki.ca_cert),
                             sasl_mechanism="PLAIN", sasl_plain_username="alice",
                             sasl_plain_password="wrong", max_block_ms=3000,
                             api_version=(2, 5, 0), reconnect_backoff_max_ms=200)
    with pytest.raises(KafkaPythonError):
        producer.send("kp-never", b"x").get(timeout=5)
    producer.close(timeout=1)
    assert "Authentication failed: Invalid username or password" in caplog.text


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_aiokafka_over_sasl_ssl(broker: InProcessBroker, pki: Pki, mechanism: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" \
        else ("bob", "bob-secret")
    settings = {"bootstrap_servers": f"127.0.0.1:{port(broker, 'SASL_SSL')}",
                "security_protocol": "SASL_SSL", "sasl_mechanism": mechanism,
                "sasl_plain_username": user, "sasl_plain_password": password,
                "ssl_context": create_ssl_context(cafile=str(pki.ca_cert))}
    topic = f"aio-{mechanism.lower()}"

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings)
        await consumer.start()
        try:
            values = []
            while len(values) < 10:
                message = await asyncio.wait_for(consumer.getone(), 20)
                values.append(message.value)
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [f"v{i}".encode() for i in range(10)]


def test_ssl_listener_requiring_a_client_certificate_refuses_one_without(
        broker: InProcessBroker, pki: Pki) -> None:
    import socket
    import ssl

    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    with pytest.raises((ssl.SSLError, ConnectionError)), socket.create_connection(
            ("127.0.0.1", port(broker, "SSL")), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        # TLS 1.3: the server's refusal arrives after the client's handshake completes
        tls.sendall(b"\x00\x00\x00\x01\x00")
        if not tls.recv(1):
            raise ConnectionError("closed")
    # the broker goes on serving clients that present one
    settings = confluent_settings(broker, pki, "SSL")
    producer = ck.Producer({**settings, "message.timeout.ms": 20000})
    producer.produce("ck-after-refusal", b"x")
    assert producer.flush(30) == 0


def test_pkcs12_stores_on_both_sides(tmp_path: Any, pki: Pki) -> None:
    # Kafka's usual layout: ssl.keystore.type=PKCS12 and a PKCS12 trust store on the
    # broker, client authentication required; librdkafka presents a PKCS12 client store,
    # and klog's own CLI reads the same store from a Java-style --command-config file.
    import json

    from typer.testing import CliRunner

    from klog.cli.app import app
    from tests.daemon.security.certs import make_pkcs12_stores

    stores = make_pkcs12_stores(pki, tmp_path / "p12")
    running = InProcessBroker(tmp_path / "broker", {
        "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(stores.server_keystore),
        "ssl.keystore.password": stores.password, "ssl.key.password": stores.password,
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(stores.truststore),
        "ssl.truststore.password": stores.password, "ssl.client.auth": "required",
    }).start()
    try:
        settings = {"bootstrap.servers": f"127.0.0.1:{port(running, 'SSL')}",
                    "security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert),
                    "ssl.keystore.location": str(stores.client_keystore),
                    "ssl.keystore.password": stores.password}
        producer = ck.Producer({**settings, "message.timeout.ms": 20000})
        for i in range(5):
            producer.produce("p12", f"v{i}".encode())
        assert producer.flush(30) == 0
        config = tmp_path / "client.properties"
        config.write_text("security.protocol=SSL\nssl.truststore.type=PKCS12\n"
                          f"ssl.truststore.location={stores.truststore}\n"
                          f"ssl.truststore.password={stores.password}\n"
                          "ssl.keystore.type=PKCS12\n"
                          f"ssl.keystore.location={stores.client_keystore}\n"
                          f"ssl.keystore.password={stores.password}\n")
        result = CliRunner().invoke(app, [
            "configs", "describe", "topic", "p12", "--json", "-b",
            f"localhost:{port(running, 'SSL')}", "--command-config", str(config)],
            env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.stderr
        assert "p12" in json.dumps(json.loads(result.stdout))
    finally:
        running.stop()


def connection_slots(broker: InProcessBroker) -> tuple[int, dict[str, float]]:
    """The connections 127.0.0.1 holds against max.connections.per.ip, and the
    socket-server connection-count metric per listener as /metrics serves it."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    server = broker.broker.server
    held = broker.call(lambda: server.quotas.per_ip.get("127.0.0.1", 0))
    bound = broker.broker.metrics.bound
    assert bound is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{bound[1]}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    metric = {s.labels["listener"]: s.value
              for family in text_string_to_metric_families(text)
              if family.name == "kafka_server_socket_server_metrics_connection_count"
              for s in family.samples}
    return held, metric


def wait_for_connection_slots(broker: InProcessBroker, expected: tuple[int, dict[str, float]],
                              timeout: float = 15.0) -> tuple[int, dict[str, float]]:
    deadline = time.monotonic() + timeout
    while True:
        now = connection_slots(broker)
        if now == expected or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def poll_for(admins: list[AdminClient], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for admin in admins:
            admin.poll(0.05)


def test_failed_authentications_and_handshakes_give_their_connection_slots_back(
        tmp_path: Any, pki: Pki) -> None:
    # The user's report (issue 28): SASL_SSL, max.connections.per.ip=10, five librdkafka
    # admin clients with a wrong password, each trying for a while and then destroyed;
    # then the right password was locked out ("Broker transport failure") while the
    # wrong clients' connections were long gone. Also TLS handshakes that fail on an SSL
    # listener requiring client certificates. After each: the right client is served,
    # and the slots and the connection-count metric are back to what they were.
    running = InProcessBroker(tmp_path, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "max.connections.per.ip": "10",
        "metrics.http.listener": "127.0.0.1:0",
    }).start()
    quiet = {"log_level": 0, "reconnect.backoff.ms": 100,
             "reconnect.backoff.max.ms": 500}
    sasl = {**confluent_settings(running, pki, "PLAIN"), **quiet}
    ssl_listener = {**confluent_settings(running, pki, "SSL"), **quiet}
    without_certificate = {k: v for k, v in ssl_listener.items()
                           if k not in ("ssl.certificate.location", "ssl.key.location")}
    untrusted_certificate = {**ssl_listener, "ssl.certificate.location": str(pki.rogue_cert),
                             "ssl.key.location": str(pki.rogue_key)}
    distrusting = {**ssl_listener, "ssl.ca.location": str(pki.rogue_ca_cert)}
    try:
        before = connection_slots(running)
        for wrong in [{**sasl, "sasl.password": "wrong"}, without_certificate,
                      untrusted_certificate, distrusting]:
            errors: list[ck.KafkaError] = []
            admins = [AdminClient({**wrong, "error_cb": errors.append}) for _ in range(5)]
            poll_for(admins, 3.0)  # each reconnects and fails again meanwhile
            del admins  # destroyed: librdkafka closes their connections
            assert errors  # they failed as they should
            admin = AdminClient(sasl if "sasl.mechanism" in wrong else ssl_listener)
            assert admin.list_topics(timeout=20).brokers  # served, not locked out
            del admin
            assert wait_for_connection_slots(running, before) == before
    finally:
        running.stop()
