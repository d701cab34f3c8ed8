"""klog/spark/live.py against a secured listener: the kafka.* security options reach the
planner's consumer and each task's client (what a Spark task runs, without the JVM)."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka as ck
import pytest

from klog.spark import live
from klog.spark.options import parse_options
from tests.daemon.security.certs import Pki
from tests.daemon.wire import InProcessBroker

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path_factory.mktemp("spark-live"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
    }).start()
    try:
        yield running
    finally:
        running.stop()


def test_secured_plan_and_read(secured: InProcessBroker, pki: Pki) -> None:
    plain = secured.broker.server.bound["PLAINTEXT"][1]
    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{plain}"})
    for i in range(50):
        producer.produce("spark-secured", f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    port = secured.broker.server.bound["SASL_SSL"][1]
    options = parse_options({
        "kafka.bootstrap.servers": f"localhost:{port}", "subscribe": "spark-secured",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": "admin", "kafka.sasl.password": "admin-secret",
        "kafka.ssl.ca.location": str(pki.ca_cert), "kafka.fetch.min.bytes": "1"})
    assert options.security["security.protocol"] == "SASL_SSL"
    assert "fetch.min.bytes" not in options.security  # not a security setting
    (offsets,) = live.plan(options)
    assert (offsets.earliest, offsets.latest) == (0, 50)
    batches = list(live.read_range(options.bootstrap_servers or "",
                                   offsets.offset_range(options), include_headers=False,
                                   read_committed=False, security=options.security))
    values = [v.as_py() for b in batches for v in b.column("value")]
    assert values == [f"v{i}".encode() for i in range(50)]


def test_without_the_security_options_the_secured_listener_is_not_read(
        secured: InProcessBroker) -> None:
    port = secured.broker.server.bound["SASL_SSL"][1]
    options = parse_options({"kafka.bootstrap.servers": f"localhost:{port}",
                             "subscribe": "spark-secured"})
    with pytest.raises(live.LiveError):
        live.plan(options)


def test_unusable_security_options_are_one_clear_error() -> None:
    options = parse_options({"kafka.bootstrap.servers": "localhost:1", "subscribe": "t",
                             "kafka.security.protocol": "SASL_SSL",
                             "kafka.sasl.mechanism": "GSSAPI"})
    with pytest.raises(live.LiveError, match="GSSAPI"):
        live.plan(options)
