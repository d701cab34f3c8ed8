"""Certificates out of their validity period, and absent ones, with real clients
(confluent-kafka, kafka-python, klog's own CLI through --command-config): a client
certificate that has expired or is not valid yet is refused by a listener that requires or
requests one (Kafka too: a presented certificate that fails verification fails the
handshake), the broker logs one line naming the client and the reason, and goes on serving
others; no certificate is refused under ssl.client.auth=required and served as
User:ANONYMOUS under requested. A broker whose own certificate has expired or is not valid
yet: every client refuses it, and the broker says so in one line at start-up."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from tests.daemon.security.certs import Pki
from tests.daemon.wire import InProcessBroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError

runner = CliRunner()
HANDSHAKE_LOGGER = "klog.daemon.server"
#: OpenSSL's verification reasons, as the broker logs them and the clients report them.
REASONS = {"expired": "certificate has expired", "future": "certificate is not yet valid"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path_factory.mktemp("certs"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,REQUIRED://127.0.0.1:0,"
                     "REQUESTED://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REQUIRED:SSL,REQUESTED:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "listener.name.required.ssl.client.auth": "required",
        "listener.name.requested.ssl.client.auth": "requested",
    }).start()
    try:
        yield running
    finally:
        running.stop()


def port(broker: InProcessBroker, listener: str) -> int:
    return broker.broker.server.bound[listener][1]


def client_cert(pki: Pki, which: str) -> tuple[Path, Path] | None:
    return {"valid": (pki.client_cert, pki.client_key),
            "expired": (pki.expired_client_cert, pki.expired_client_key),
            "future": (pki.future_client_cert, pki.future_client_key),
            "none": None}[which]


# -- the three clients, each answering "served" or the error it reported -----------------


def confluent(port_: int, pki: Pki, cert: tuple[Path, Path] | None,
              ca: Path | None = None) -> str:
    settings: dict[str, Any] = {
        "bootstrap.servers": f"127.0.0.1:{port_}", "security.protocol": "SSL",
        "ssl.ca.location": str(ca or pki.ca_cert), "message.timeout.ms": 8000,
        "reconnect.backoff.max.ms": 1000}
    if cert is not None:
        settings |= {"ssl.certificate.location": str(cert[0]),
                     "ssl.key.location": str(cert[1])}
    # librdkafka reports a refused TLS connection in its log (and only after retries
    # through error_cb), so its log is read through a logger of the test's own.
    lines: list[str] = []
    logger = logging.getLogger(f"rdkafka.test.{time.monotonic_ns()}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(_ListHandler(lines))
    delivered: list[bool] = []
    producer = ck.Producer({**settings, "logger": logger})
    producer.produce("certs", b"x",
                     on_delivery=lambda err, _msg: delivered.append(err is None))
    deadline = time.monotonic() + 15
    while not delivered and not any("SSL" in line for line in lines) \
            and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(1)
    if delivered == [True]:
        return "served"
    return next((line for line in lines if "SSL" in line), "no answer")


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def kafka_python(port_: int, pki: Pki, cert: tuple[Path, Path] | None,
                 ca: Path | None = None) -> str:
    settings: dict[str, Any] = {
        "bootstrap_servers": f"127.0.0.1:{port_}", "security_protocol": "SSL",
        "ssl_cafile": str(ca or pki.ca_cert), "max_block_ms": 3000,
        "request_timeout_ms": 5000, "reconnect_backoff_max_ms": 500}
    if cert is not None:
        settings |= {"ssl_certfile": str(cert[0]), "ssl_keyfile": str(cert[1])}
    try:
        producer = KafkaProducer(**settings)
        try:
            producer.send("certs", b"x").get(timeout=10)
        finally:
            producer.close(timeout=2)
    except KafkaPythonError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "served"


def klog_cli(port_: int, pki: Pki, cert: tuple[Path, Path] | None,
             ca: Path | None = None, tmp: Path | None = None) -> str:
    assert tmp is not None
    settings = tmp / f"client-{time.monotonic_ns()}.properties"
    lines = ["security.protocol=SSL", f"ssl.ca.location={ca or pki.ca_cert}"]
    if cert is not None:
        lines += [f"ssl.certificate.location={cert[0]}", f"ssl.key.location={cert[1]}"]
    settings.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["configs", "describe", "broker", "0", "-b", f"127.0.0.1:{port_}",
                                 "--command-config", str(settings)],
                           env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if result.exit_code == 0:
        return "served"
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr.strip()


#: What each client reports when the broker refuses its certificate.
CLIENT_SEES = {"confluent-kafka": ("SSL connection closed by peer",),
               "kafka-python": ("Unable to bootstrap",),
               "klog": ("closed the connection", "Connection reset by peer")}
CLIENTS = {"confluent-kafka": confluent, "kafka-python": kafka_python, "klog": klog_cli}


def run(client: str, port_: int, pki: Pki, cert: tuple[Path, Path] | None, tmp: Path,
        ca: Path | None = None) -> str:
    if client == "klog":
        return klog_cli(port_, pki, cert, ca, tmp)
    return CLIENTS[client](port_, pki, cert, ca)


def handshake_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The broker's handshake failure lines; waits a little for the first: asyncio closes
    the socket before the broker's thread gets to log why."""
    deadline = time.monotonic() + 5
    while True:
        lines = [r.getMessage() for r in caplog.records
                 if r.name == HANDSHAKE_LOGGER and "TLS handshake" in r.getMessage()]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def principals(broker: InProcessBroker, listener: str) -> set[KafkaPrincipal]:
    return broker.call(lambda: {c.principal for c in broker.broker.server.connections
                                if c.listener_name == listener})


# -- client certificates -----------------------------------------------------------------


@pytest.mark.parametrize("client", list(CLIENTS))
@pytest.mark.parametrize("listener", ["REQUIRED", "REQUESTED"])
@pytest.mark.parametrize("which", ["expired", "future"])
def test_a_client_certificate_out_of_its_validity_is_refused(
        broker: InProcessBroker, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        client: str, listener: str, which: str) -> None:
    caplog.set_level(logging.INFO, logger=HANDSHAKE_LOGGER)
    outcome = run(client, port(broker, listener), pki, client_cert(pki, which), tmp_path)
    # TLS 1.3: the client's handshake is over before the broker checks its certificate;
    # the client sees the connection closed (klog, as Python's asyncio, sends no alert)
    assert any(seen in outcome for seen in CLIENT_SEES[client]), outcome
    # the broker's one line: who, which listener, why
    lines = handshake_lines(caplog)
    assert lines, caplog.text
    assert all(line.startswith(f"TLS handshake with 127.0.0.1 on listener {listener} "
                               "failed:") and "\n" not in line for line in lines)
    assert REASONS[which] in lines[0]
    # the broker goes on serving a client with a valid certificate on the same listener
    assert run(client, port(broker, listener), pki, client_cert(pki, "valid"),
               tmp_path) == "served"


@pytest.mark.parametrize("client", list(CLIENTS))
def test_no_client_certificate_refused_when_required_anonymous_when_requested(
        broker: InProcessBroker, pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        client: str) -> None:
    caplog.set_level(logging.INFO, logger=HANDSHAKE_LOGGER)
    assert run(client, port(broker, "REQUIRED"), pki, None, tmp_path) != "served"
    assert any("peer did not return a certificate" in line
               for line in handshake_lines(caplog))
    assert run(client, port(broker, "REQUESTED"), pki, None, tmp_path) == "served"


def test_requested_without_a_certificate_is_anonymous(broker: InProcessBroker,
                                                      pki: Pki) -> None:
    settings = {"bootstrap.servers": f"127.0.0.1:{port(broker, 'REQUESTED')}",
                "security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert)}
    without = ck.Producer(settings)
    with_cert = ck.Producer({**settings, "ssl.certificate.location": str(pki.client_cert),
                             "ssl.key.location": str(pki.client_key)})
    for producer in (without, with_cert):
        producer.produce("certs-anonymous", b"x")
        assert producer.flush(15) == 0
    # both connections are open: one anonymous, one named by its certificate
    assert principals(broker, "REQUESTED") >= {
        ANONYMOUS, KafkaPrincipal("User", pki.client_dn)}


# -- the broker's own certificate ----------------------------------------------------------


@pytest.mark.parametrize("which", ["expired", "future"])
def test_a_broker_certificate_out_of_its_validity(
        tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture, which: str) -> None:
    keystore = pki.expired_server_keystore if which == "expired" \
        else pki.future_server_keystore
    caplog.set_level(logging.INFO, logger="klog.daemon.server")
    # Kafka starts with it, and so does klog, but klog says so in one line
    running = InProcessBroker(tmp_path / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}).start()
    try:
        warnings_ = [r.getMessage() for r in caplog.records
                     if r.levelno == logging.WARNING and "key store certificate" in r.getMessage()]
        when = pki.expired_on if which == "expired" else pki.valid_from
        problem = "expired on" if which == "expired" else "is not valid until"
        assert warnings_ == [
            f"listener SSL (SSL): the key store certificate CN=localhost {problem} "
            f"{when:%Y-%m-%d %H:%M:%S} UTC; clients will refuse to connect until "
            "ssl.keystore.location holds a valid one"]
        ssl_port = port(running, "SSL")
        # every client refuses the broker, with the reason
        assert REASONS[which].replace("certificate ", "") in \
            run("klog", ssl_port, pki, None, tmp_path)
        assert "certificate verify failed" in run("confluent-kafka", ssl_port, pki, None,
                                                  tmp_path)
        assert run("kafka-python", ssl_port, pki, None, tmp_path) != "served"
    finally:
        running.stop()
