"""The stand-ins for Kafka's scripts that let kafka-python's SSL and SASL fixtures start klog:
the fixture's JKS stores become PEM klog loads, its JAAS file becomes the listener's
sasl.jaas.config, and Kafka tools' command lines parse as Kafka's do."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from benchmarks import kafka_python_suite as suite


def _keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("keytool") is None or shutil.which("openssl") is None,
                    reason="needs keytool and openssl")
def test_the_fixtures_jks_stores_become_pem_files_a_server_context_loads(
        tmp_path: Path) -> None:
    keystore, truststore = tmp_path / "server.keystore.jks", tmp_path / "server.truststore.jks"
    cert = tmp_path / "cert"
    # As kafka-python's gen_ssl_resources: a key pair "localhost" in one store, the
    # certificate that vouches for it as "CARoot" in the trust store, password foobar.
    _keytool("-genkeypair", "-keystore", str(keystore), "-alias", "localhost", "-keyalg",
             "RSA", "-validity", "1", "-storepass", "foobar", "-keypass", "foobar",
             "-dname", "CN=localhost")
    _keytool("-exportcert", "-keystore", str(keystore), "-alias", "localhost", "-storepass",
             "foobar", "-file", str(cert))
    _keytool("-importcert", "-noprompt", "-keystore", str(truststore), "-alias", "CARoot",
             "-file", str(cert), "-storepass", "foobar")
    settings = {"ssl.keystore.location": str(keystore), "ssl.keystore.password": "foobar",
                "ssl.key.password": "foobar", "ssl.truststore.location": str(truststore),
                "ssl.truststore.password": "foobar", "listeners": "SSL://localhost:9093"}

    suite._jks_to_pem(settings)

    assert settings == {
        "ssl.keystore.location": str(tmp_path / "server.keystore.pem"),
        "ssl.keystore.type": "PEM",
        "ssl.truststore.location": str(tmp_path / "server.truststore.pem"),
        "ssl.truststore.type": "PEM",
        "listeners": "SSL://localhost:9093",
    }
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(settings["ssl.keystore.location"])
    context.load_verify_locations(settings["ssl.truststore.location"])
    assert context.cert_store_stats()["x509"] == 1


def test_the_kafkaserver_section_of_the_jaas_file_becomes_the_listeners_jaas_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jaas = tmp_path / "kafka_server_jaas.conf"
    jaas.write_text('KafkaServer {\n    org.apache.kafka.common.security.scram.ScramLoginModule'
                    ' required username="alice" password="alice-secret";\n\n};\nClient {};')
    monkeypatch.setenv("KAFKA_OPTS", f" -Djava.security.auth.login.config={jaas}")
    settings = {"listeners": "SASL_PLAINTEXT://localhost:9092",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512"}

    entry = suite._jaas_to_listener(settings)

    assert entry is not None and entry.options == {"username": "alice",
                                                   "password": "alice-secret"}
    assert settings["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice"'
        ' password="alice-secret";')


def test_no_jaas_file_leaves_the_settings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    settings = {"listeners": "SSL://localhost:9093"}
    assert suite._jaas_to_listener(settings) is None
    assert settings == {"listeners": "SSL://localhost:9093"}


def test_a_kafka_tools_flags_without_values_do_not_shift_the_pairs() -> None:
    args = ["--zookeeper", "127.0.0.1:2181/kp", "--alter", "--entity-type", "users",
            "--entity-name", "alice", "--add-config", "SCRAM-SHA-256=[password=x]"]
    assert suite._options(args) == {
        "--zookeeper": "127.0.0.1:2181/kp", "--alter": "", "--entity-type": "users",
        "--entity-name": "alice", "--add-config": "SCRAM-SHA-256=[password=x]"}


def test_a_script_call_the_stand_ins_do_not_know_fails_with_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert suite.kafka_script(["kafka-run-class.sh", "kafka.tools.DumpLogSegments"]) == 1
    assert capsys.readouterr().err == (
        "klog's stand-in for kafka-run-class.sh does not do: kafka.tools.DumpLogSegments\n")
