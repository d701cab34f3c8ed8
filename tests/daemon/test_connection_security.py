"""TLS and SASL on real sockets (daemon/connection.py, server.py with daemon/security/):
what a client may send before authenticating, failures, raw v0 tokens, sessions that
expire, client certificates, TLS against plaintext and the reverse, fetches through TLS;
every way a connection ends (client close or reset, broker close, failed authentication,
failed TLS handshake, idle close) gives its connection slot back, on every listener type."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from klog.protocol import scram
from klog.protocol.errors import ErrorCode
from klog.protocol.records.v2 import build_batch
from tests.daemon.security.certs import Pki
from tests.daemon.wire import InProcessBroker, WireClient, closed_without_answer, reset_on_close

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="alice-secret";')
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path_factory.mktemp("sec"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SHORT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,"
                                          "SASL_PLAINTEXT:SASL_PLAINTEXT,SHORT:SASL_PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "ssl.client.auth": "requested",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.short.plain.sasl.jaas.config": JAAS,
        "listener.name.short.connections.max.reauth.ms": "300",
        "sasl.server.max.receive.size": "1024",
        "connection.failed.authentication.delay.ms": "200",
    }).start()
    try:
        yield running
    finally:
        running.stop()


def port(broker: InProcessBroker, listener: str) -> int:
    return broker.broker.server.bound[listener][1]


def client(broker: InProcessBroker, listener: str) -> WireClient:
    return WireClient(("127.0.0.1", port(broker, listener)))


def tls_client(broker: InProcessBroker, pki: Pki, cert: Path | None = None,
               key: Path | None = None, listener: str = "SSL") -> WireClient:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    wire = client(broker, listener)
    wire.sock = ctx.wrap_socket(wire.sock, server_hostname="localhost")
    return wire


def principals(broker: InProcessBroker) -> set[KafkaPrincipal]:
    return broker.call(lambda: {c.principal for c in broker.broker.server.connections})


def authenticate_plain(wire: WireClient, password: str = "alice-secret",
                       version: int = 2) -> Any:
    handshake = wire.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert handshake.error_code == 0 and "PLAIN" in handshake.mechanisms
    return wire.call(SASL_AUTHENTICATE, version,
                     {"auth_bytes": f"\x00alice\x00{password}".encode()})


def test_sasl_plain_then_requests_are_served(broker: InProcessBroker) -> None:
    with client(broker, "SASL_PLAINTEXT") as wire:
        assert wire.call(18, 3, {"client_software_name": "t",
                                 "client_software_version": "1"}).error_code == 0
        result = authenticate_plain(wire)
        assert result.error_code == 0 and result.error_message is None
        assert wire.metadata([]).brokers
        assert KafkaPrincipal("User", "alice") in principals(broker)


def test_a_request_before_authentication_closes_the_connection(
        broker: InProcessBroker) -> None:
    with client(broker, "SASL_PLAINTEXT") as wire:
        wire.send(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                 "include_cluster_authorized_operations": False,
                                 "include_topic_authorized_operations": False})
        assert closed_without_answer(wire.sock)
    with client(broker, "SASL_PLAINTEXT") as wire:  # the broker serves the next one
        assert authenticate_plain(wire).error_code == 0


def test_wrong_password_fails_and_closes_after_the_answer(broker: InProcessBroker) -> None:
    with client(broker, "SASL_PLAINTEXT") as wire:
        result = authenticate_plain(wire, password="wrong")
        assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in result.error_message
        # nothing more is served: a request now gets no answer, and the connection closes
        wire.send(18, 0, {})
        assert closed_without_answer(wire.sock)


def test_unsupported_mechanism_is_answered_then_closed(broker: InProcessBroker) -> None:
    with client(broker, "SASL_PLAINTEXT") as wire:
        handshake = wire.call(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert list(handshake.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
        assert wire.is_closed_by_peer()


def test_oversized_token_before_authentication_closes(broker: InProcessBroker) -> None:
    with client(broker, "SASL_PLAINTEXT") as wire:
        assert wire.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        wire.send(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00" + b"x" * 2048})
        assert closed_without_answer(wire.sock)


def test_v0_handshake_then_raw_tokens(broker: InProcessBroker) -> None:
    with client(broker, "SASL_PLAINTEXT") as wire:
        assert wire.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        token = b"\x00alice\x00alice-secret"
        wire.send_raw(len(token).to_bytes(4, "big") + token)
        assert wire.recv_frame() == b""  # an empty token, size-prefixed, no header
        assert wire.metadata([]).brokers
    with client(broker, "SASL_PLAINTEXT") as wire:  # a wrong raw token: closed, no answer
        assert wire.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        token = b"\x00alice\x00nope"
        wire.send_raw(len(token).to_bytes(4, "big") + token)
        assert closed_without_answer(wire.sock)


def test_scram_user_added_through_the_admin_api_authenticates(
        broker: InProcessBroker) -> None:
    salt = b"0123456789abcdef"
    salted = scram.salted_password("SCRAM-SHA-256", "bob-secret", salt, 4096)
    with client(broker, "PLAINTEXT") as admin:
        altered = admin.call(51, 0, {"deletions": [], "upsertions": [
            {"name": "bob", "mechanism": 1, "iterations": 4096, "salt": salt,
             "salted_password": salted}]})
        assert [(r.user, r.error_code) for r in altered.results] == [("bob", 0)]
        described = admin.call(50, 0, {"users": [{"name": "bob"}, {"name": "nobody"}]})
        assert [(r.user, r.error_code, [(int(c.mechanism), c.iterations)
                                         for c in r.credential_infos])
                for r in described.results] == [
            ("bob", 0, [(1, 4096)]), ("nobody", ErrorCode.RESOURCE_NOT_FOUND, [])]
    with client(broker, "SASL_PLAINTEXT") as wire:
        assert wire.call(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
        scram_client = scram.ScramClient("SCRAM-SHA-256", "bob", "bob-secret")
        first = wire.call(SASL_AUTHENTICATE, 2, {"auth_bytes": scram_client.first()})
        assert first.error_code == 0
        final = wire.call(SASL_AUTHENTICATE, 2,
                          {"auth_bytes": scram_client.final(first.auth_bytes)})
        assert final.error_code == 0
        scram_client.verify(final.auth_bytes)
        assert KafkaPrincipal("User", "bob") in principals(broker)


def test_expired_session_closes_at_the_next_request(broker: InProcessBroker) -> None:
    with client(broker, "SHORT") as wire:
        result = authenticate_plain(wire, version=1)
        assert result.error_code == 0
        assert result.session_lifetime.total_seconds() * 1000 == 300
        time.sleep(0.4)  # past the session's end (a wait, not a timing assertion)
        wire.send(18, 0, {})
        assert closed_without_answer(wire.sock)
    with client(broker, "SHORT") as wire:  # re-authenticating in time keeps it open
        authenticate_plain(wire, version=1)
        time.sleep(0.2)
        assert authenticate_plain(wire, version=1).error_code == 0
        time.sleep(0.2)
        assert wire.call(18, 0, {}).error_code == 0


def test_sasl_requests_on_a_listener_without_sasl(broker: InProcessBroker) -> None:
    with client(broker, "PLAINTEXT") as wire:
        assert wire.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code \
            == ErrorCode.ILLEGAL_SASL_STATE


def test_client_certificate_names_the_principal(broker: InProcessBroker, pki: Pki) -> None:
    with tls_client(broker, pki, pki.client_cert, pki.client_key) as wire:
        assert wire.metadata([]).brokers
        assert KafkaPrincipal("User", pki.client_dn) in principals(broker)
    with tls_client(broker, pki) as wire:  # requested, not required: ANONYMOUS
        assert wire.metadata([]).brokers
        assert ANONYMOUS in principals(broker)
    # a certificate from a CA the broker does not trust: the handshake (or, with TLS 1.3,
    # the first read after it) fails
    with pytest.raises((ssl.SSLError, ConnectionError)), \
            tls_client(broker, pki, pki.rogue_cert, pki.rogue_key) as wire:
        wire.metadata([])


def test_tls_against_plaintext_and_the_reverse(broker: InProcessBroker, pki: Pki) -> None:
    ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
    raw = socket.create_connection(("127.0.0.1", port(broker, "PLAINTEXT")), timeout=5)
    with pytest.raises((ssl.SSLError, ConnectionError, TimeoutError)):
        ctx.wrap_socket(raw, server_hostname="localhost")  # ClientHello: a bad frame size
    raw.close()
    with client(broker, "SSL") as wire:  # a Kafka request where a ClientHello belongs
        wire.send(18, 0, {})
        assert closed_without_answer(wire.sock)
    with client(broker, "PLAINTEXT") as wire:  # both listeners still serve
        assert wire.call(18, 0, {}).error_code == 0
    with tls_client(broker, pki) as wire:
        assert wire.call(18, 0, {}).error_code == 0


def test_fetch_through_tls_sends_the_stored_bytes(broker: InProcessBroker, pki: Pki) -> None:
    records = build_batch([(0, None, bytes([i % 251]) * 100_000) for i in range(8)])
    with client(broker, "PLAINTEXT") as wire:
        wire.create_topic("tls-fetch")
        assert wire.produce("tls-fetch", 0, records).responses[0] \
            .partition_responses[0].error_code == 0
        plain = wire.fetch("tls-fetch", 0, 0, max_bytes=4 << 20)
    with tls_client(broker, pki) as wire:
        secured = wire.fetch("tls-fetch", 0, 0, max_bytes=4 << 20)
    data = secured.responses[0].partitions[0].records
    assert len(data) > 800_000  # several TLS_REGION_CHUNK pieces
    assert data == plain.responses[0].partitions[0].records


def test_produce_through_tls_large_and_small_requests(broker: InProcessBroker,
                                                      pki: Pki) -> None:
    # TLS connections receive into the frame decoder's buffers (TlsConnection): a body of
    # 64 KiB or more is decrypted in place, in 256 KiB chunks; small frames share the
    # scratch buffer. Both must reach the log byte for byte.
    large = build_batch([(0, None, bytes([i % 251]) * 150_000) for i in range(6)])  # 900 KB
    small = [build_batch([(0, None, bytes([i]) * 100)]) for i in range(20)]
    with tls_client(broker, pki) as wire:
        assert broker.call(lambda: {type(c).__name__ for c in broker.broker.server.connections
                                    if c.listener_name == "SSL"}) == {"TlsConnection"}
        wire.create_topic("tls-produce")
        for records in [large, *small, large]:
            assert wire.produce("tls-produce", 0, records).responses[0] \
                .partition_responses[0].error_code == 0
    with client(broker, "PLAINTEXT") as wire:
        fetched = wire.fetch("tls-produce", 0, 0, max_bytes=8 << 20)
    data = fetched.responses[0].partitions[0].records
    assert len(data) == 2 * len(large) + sum(len(r) for r in small)
    # the first batch as sent, but for the base offset and leader epoch the broker sets
    assert data[16:len(large)] == large[16:]


def ssl_handshake(broker: InProcessBroker, ctx: ssl.SSLContext) -> None:
    """A TLS handshake with the SSL listener, trusting what ``ctx`` trusts."""
    with socket.create_connection(("127.0.0.1", port(broker, "SSL")), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost"):
        pass


def set_ssl_keystore(broker: InProcessBroker, location: str) -> int:
    """kafka-configs' per-listener key store update (IncrementalAlterConfigs v1)."""
    with client(broker, "PLAINTEXT") as admin:
        result = admin.call(44, 1, {"resources": [{
            "resource_type": 4, "resource_name": "0", "configs": [{
                "name": "listener.name.ssl.ssl.keystore.location",
                "config_operation": 0, "value": location}]}],
            "validate_only": False})
        return int(result.responses[0].error_code)


def test_dynamic_key_store_change_applies_to_new_connections(
        tmp_path: Path, pki: Pki) -> None:
    running = InProcessBroker(tmp_path, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore)}).start()
    trusts_ca = ssl.create_default_context(cafile=str(pki.ca_cert))
    trusts_rogue = ssl.create_default_context(cafile=str(pki.rogue_ca_cert))

    def handshake(ctx: ssl.SSLContext) -> None:
        ssl_handshake(running, ctx)

    def set_keystore(location: str) -> int:
        return set_ssl_keystore(running, location)

    try:
        handshake(trusts_ca)
        assert set_keystore(str(pki.rogue_server_keystore)) == 0
        handshake(trusts_rogue)  # new connections present the new certificate
        with pytest.raises(ssl.SSLError):
            handshake(trusts_ca)
        # an unusable key store is refused (INVALID_REQUEST); the listener keeps its own
        assert set_keystore("/nonexistent.pem") == ErrorCode.INVALID_REQUEST
        handshake(trusts_rogue)
    finally:
        running.stop()


def test_key_store_rewritten_in_place_is_reloaded_when_set_again(
        tmp_path: Path, pki: Pki) -> None:
    # Kafka's certificate rotation without a new path: rewrite the file, then set the same
    # location again; SslFactory rebuilds when the file changed (shouldBeRebuilt), and
    # checks the new certificate against the one in use (its DN), not the file's new self.
    rotating = tmp_path / "rotating.pem"
    rotating.write_bytes(pki.server_keystore.read_bytes())
    running = InProcessBroker(tmp_path / "broker", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(rotating)}).start()
    trusts_ca = ssl.create_default_context(cafile=str(pki.ca_cert))
    trusts_rogue = ssl.create_default_context(cafile=str(pki.rogue_ca_cert))

    def handshake(ctx: ssl.SSLContext) -> None:
        ssl_handshake(running, ctx)

    def rewrite(source: Path) -> None:
        before = rotating.stat().st_mtime_ns
        rotating.write_bytes(source.read_bytes())
        os.utime(rotating, ns=(before + 1_000_000_000, before + 1_000_000_000))

    def set_again() -> int:
        return set_ssl_keystore(running, str(rotating))

    try:
        handshake(trusts_ca)
        assert set_again() == 0  # the same file, unchanged: nothing to rebuild
        handshake(trusts_ca)
        rewrite(pki.rogue_server_keystore)  # same DN and names, another CA
        handshake(trusts_ca)  # not reloaded until the location is set again
        assert set_again() == 0
        handshake(trusts_rogue)
        with pytest.raises(ssl.SSLError):
            handshake(trusts_ca)
        rewrite(pki.other_name_server_keystore)  # another DN: refused, as Kafka does
        assert set_again() == ErrorCode.INVALID_REQUEST
        handshake(trusts_rogue)  # the listener keeps what it had
    finally:
        running.stop()


def test_tls_handshake_without_an_idle_limit(tmp_path: Path, pki: Pki) -> None:
    # connections.max.idle.ms -1 (no idle limit) once made the handshake timeout 1 ms
    running = InProcessBroker(tmp_path, {
        "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        # the inter-broker listener's key store must verify with its trust store (Kafka)
        "ssl.truststore.location": str(pki.ca_cert),
        "connections.max.idle.ms": "-1"}).start()
    try:
        with tls_client(running, pki) as wire:
            assert wire.call(18, 0, {}).error_code == 0
            # ... and made every connection idle at once: the idle sweep (every 10 ms at
            # that limit) closed it between requests, or before the first was answered.
            time.sleep(0.3)
            assert wire.call(18, 0, {}).error_code == 0
    finally:
        running.stop()


def alter_broker(broker: InProcessBroker, name: str, value: str) -> tuple[int, str]:
    with client(broker, "PLAINTEXT") as admin:
        result = admin.call(44, 1, {"resources": [{
            "resource_type": 4, "resource_name": "0", "configs": [{
                "name": name, "config_operation": 0, "value": value}]}],
            "validate_only": False})
        answer = result.responses[0]
        return int(answer.error_code), str(answer.error_message or "")


def test_dynamic_key_store_checks_as_kafka(tmp_path: Path, pki: Pki,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """Kafka's SslFactory.validateReconfiguration: the DN and SANs kept, and on the
    inter-broker listener a handshake with the old settings (so an expired certificate is
    refused there); elsewhere an expired certificate is taken, with klog's warning."""
    running = InProcessBroker(tmp_path, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.location": str(pki.ca_cert)}).start()
    trusts_ca = ssl.create_default_context(cafile=str(pki.ca_cert))

    def handshake(listener: str) -> None:
        with socket.create_connection(("127.0.0.1", port(running, listener)), timeout=5) \
                as raw, trusts_ca.wrap_socket(raw, server_hostname="localhost"):
            pass

    try:
        code, message = alter_broker(running, "listener.name.internal.ssl.keystore.location",
                                     str(pki.expired_server_keystore))
        assert code == ErrorCode.INVALID_REQUEST
        assert "listener INTERNAL" in message and "certificate has expired" in message
        handshake("INTERNAL")  # still the old certificate
        code, message = alter_broker(running, "listener.name.ssl.ssl.keystore.location",
                                     str(pki.other_name_server_keystore))
        assert code == ErrorCode.INVALID_REQUEST
        assert "distinguished name does not match" in message and "CN=other-broker" in message
        handshake("SSL")
        caplog.set_level(logging.WARNING, logger="klog.daemon.server")
        assert alter_broker(running, "listener.name.ssl.ssl.keystore.location",
                            str(pki.expired_server_keystore)) == (0, "")
        assert any("listener SSL (SSL): the key store certificate CN=localhost expired on"
                   in r.getMessage() for r in caplog.records)
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
            handshake("SSL")
    finally:
        running.stop()


# -- every way a connection ends gives its slot back ---------------------------------------
#
# A connection counts against the connection limits (max.connections, .per.ip) from its
# accept until its socket is closed; the socket-server connection-count metric shows the
# same count. On every listener type and however the connection ends, both must come back
# to what they were. A SASL_SSL connection whose authentication failed once kept its slot
# for good (asyncio's TLS close never ended after the client's end of stream had arrived
# while reading was paused), and a handful of wrong passwords locked a host out.

LISTENER_TYPES = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
UNKNOWN_API_FRAME = (10).to_bytes(4, "big") + (9999).to_bytes(2, "big") + bytes(8)


def _four_listeners(pki: Pki, **overrides: str) -> dict[str, str]:
    return {
        "listeners": ",".join(f"{t}://127.0.0.1:0" for t in LISTENER_TYPES),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "ssl.client.auth": "requested",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "200",
        "metrics.http.listener": "127.0.0.1:0",
        **overrides,
    }


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[InProcessBroker]:
    """A broker with a listener of each security protocol, metrics on."""
    running = InProcessBroker(tmp_path_factory.mktemp("slots"), _four_listeners(pki)).start()
    try:
        yield running
    finally:
        running.stop()


@dataclasses.dataclass(frozen=True)
class Slots:
    """What the limits count (in total, per listener, per address), the connections
    being served, and the connection-count metric per listener as /metrics serves it."""

    total: int
    per_listener: dict[str, int]
    per_ip: dict[str, int]
    served: int
    metric: dict[str, float]


def slots(broker: InProcessBroker) -> Slots:
    from prometheus_client.parser import text_string_to_metric_families

    server = broker.broker.server
    total, per_listener, per_ip, served = broker.call(lambda: (
        server.quotas.total,
        {k: v for k, v in server.quotas.per_listener.items() if v},
        dict(server.quotas.per_ip), len(server.connections)))
    bound = broker.broker.metrics.bound
    assert bound is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{bound[1]}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    metric = {s.labels["listener"]: s.value
              for family in text_string_to_metric_families(text)
              if family.name == "kafka_server_socket_server_metrics_connection_count"
              for s in family.samples}
    return Slots(total, per_listener, per_ip, served, metric)


def wait_for_slots(broker: InProcessBroker, expected: Slots, timeout: float = 15.0) -> Slots:
    """The slots once they equal ``expected``, or as they are after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        now = slots(broker)
        if now == expected or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def connected(broker: InProcessBroker, pki: Pki, listener: str,
              password: str | None = "alice-secret") -> WireClient:
    """A connection to ``listener`` through TLS and SASL as it asks, one request
    answered (an authentication with ``password`` on SASL listeners; None: no
    authentication)."""
    wire = (tls_client(broker, pki, listener=listener) if "SSL" in listener
            else client(broker, listener))
    if "SASL" in listener and password is not None:
        result = authenticate_plain(wire, password=password)
        assert result.error_code == (0 if password == "alice-secret"
                                     else ErrorCode.SASL_AUTHENTICATION_FAILED)
    else:
        assert wire.call(18, 0, {}).error_code == 0
    return wire


def closed_by_broker(sock: socket.socket, timeout: float = 10.0) -> bool:
    """The broker ended the connection within ``timeout`` (what it sent first is read
    and dropped; a TLS alert or a reset count as an end)."""
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            continue
        except (ConnectionError, ssl.SSLError):
            return True
    return False


@pytest.mark.parametrize("listener", LISTENER_TYPES)
@pytest.mark.parametrize("ending", ["client close", "client reset", "broker close"])
def test_a_served_connection_gives_its_slot_back(four: InProcessBroker, pki: Pki,
                                                 listener: str, ending: str) -> None:
    before = slots(four)
    wire = connected(four, pki, listener)
    during = slots(four)
    assert during.total == before.total + 1
    assert during.metric[listener] == before.metric[listener] + 1
    if ending == "client reset":
        reset_on_close(wire.sock)
    elif ending == "broker close":  # a request for an API that does not exist
        wire.send_raw(UNKNOWN_API_FRAME)
        assert closed_by_broker(wire.sock)
    wire.close()
    assert wait_for_slots(four, before) == before


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("client_closes", [True, False], ids=["client closes", "client waits"])
def test_a_failed_authentication_gives_its_slot_back(four: InProcessBroker, pki: Pki,
                                                     listener: str, client_closes: bool
                                                     ) -> None:
    before = slots(four)
    for _ in range(3):
        wire = connected(four, pki, listener, password="wrong")
        if client_closes:  # as librdkafka does at once on the failure's answer
            wire.close()
        else:  # the broker closes after connection.failed.authentication.delay.ms
            assert closed_by_broker(wire.sock)
            wire.close()
    assert wait_for_slots(four, before) == before
    with connected(four, pki, listener):  # the right password is served
        pass
    assert wait_for_slots(four, before) == before


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
@pytest.mark.parametrize("failure", ["client distrusts the broker", "not TLS",
                                     "untrusted client certificate"])
def test_a_failed_tls_handshake_gives_its_slot_back(four: InProcessBroker, pki: Pki,
                                                    listener: str, failure: str) -> None:
    before = slots(four)
    for _ in range(3):
        raw = socket.create_connection(("127.0.0.1", port(four, listener)), timeout=5)
        if failure == "not TLS":  # a Kafka request where a ClientHello belongs
            raw.sendall(UNKNOWN_API_FRAME)
            assert closed_by_broker(raw)
            raw.close()
            continue
        if failure == "client distrusts the broker":
            ctx = ssl.create_default_context(cafile=str(pki.rogue_ca_cert))
        else:
            ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
            ctx.load_cert_chain(str(pki.rogue_cert), str(pki.rogue_key))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tls = ctx.wrap_socket(raw, server_hostname="localhost")
            # TLS 1.3: the broker's refusal of the client certificate comes after the
            # client's side of the handshake is done, at the first read
            tls.sendall(UNKNOWN_API_FRAME)
            if not tls.recv(1):
                raise ConnectionError("closed")
        raw.close()
    assert wait_for_slots(four, before) == before


def test_idle_and_silent_connections_give_their_slots_back(tmp_path: Path, pki: Pki
                                                          ) -> None:
    # connections.max.idle.ms closes idle connections of every listener type; on TLS
    # listeners it also bounds the handshake of a client that connects and says nothing.
    running = InProcessBroker(tmp_path, _four_listeners(
        pki, **{"connections.max.idle.ms": "500"})).start()
    try:
        before = slots(running)
        clients = [connected(running, pki, listener) for listener in LISTENER_TYPES]
        silent = [socket.create_connection(("127.0.0.1", port(running, listener)), timeout=5)
                  for listener in ("SSL", "SASL_SSL")]
        assert slots(running).total == before.total + 6
        for wire in clients:
            assert closed_by_broker(wire.sock)
        for sock in silent:
            assert closed_by_broker(sock)
        assert wait_for_slots(running, before) == before
        for wire in clients:
            wire.close()
        for sock in silent:
            sock.close()
    finally:
        running.stop()


def test_a_silent_peer_cannot_hold_a_graceful_close_open(four: InProcessBroker,
                                                        pki: Pki) -> None:
    # A failed authentication closes gracefully: on TLS the broker sends its close_notify
    # and waits for the peer's. A client that neither answers nor closes held the slot
    # for asyncio's 30 s shutdown timeout; the close is bounded by CLOSE_GRACE_SECONDS
    # (klog/daemon/connection.py: 5 s).
    before = slots(four)
    wire = connected(four, pki, "SASL_SSL", password="wrong")
    assert wait_for_slots(four, before, timeout=15) == before
    wire.close()
