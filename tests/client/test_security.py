"""The client's security settings (klog/client/security.py) from client config names."""

from __future__ import annotations

from pathlib import Path

import pytest

from klog.client.security import ClientSecurity, SecurityConfigError
from tests.daemon.security.certs import Pki, make_pkcs12_stores


def test_librdkafka_and_java_spellings(pki: Pki) -> None:
    plain = ClientSecurity.from_properties({})
    assert plain.protocol == "PLAINTEXT" and plain.ssl_context is None and not plain.uses_sasl
    rdkafka = ClientSecurity.from_properties({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "bob", "sasl.password": "pw", "ssl.ca.location": str(pki.ca_cert),
        "ssl.endpoint.identification.algorithm": "none"})
    assert rdkafka.uses_sasl and rdkafka.ssl_context is not None
    assert (rdkafka.username, rdkafka.password, rdkafka.check_hostname) == ("bob", "pw", False)
    java = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                            'required username="alice" password="a-secret";'})
    assert (java.username, java.password, java.ssl_context) == ("alice", "a-secret", None)
    cert = ClientSecurity.from_properties({
        "security.protocol": "SSL", "ssl.truststore.location": str(pki.ca_cert),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key)})
    assert cert.ssl_context is not None


@pytest.mark.parametrize("props, message", [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_PLAINTEXT"}, "GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.username"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "broken"}, "sasl.jaas.config"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "JKS"}, "keytool"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "cannot read"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "P12",
      "ssl.keystore.password": "wrong"}, "wrong password"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "P12",
      "ssl.keystore.type": "PEM"}, "the file is PKCS12"),
])
def test_unusable_settings(props: dict[str, str], message: str, pki: Pki,
                           tmp_path: Path) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    jks = tmp_path / "store.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    files = {"P12": str(stores.client_keystore), "JKS": str(jks)}
    with pytest.raises(SecurityConfigError, match=message) as info:
        ClientSecurity.from_properties({k: files.get(v, v) for k, v in props.items()})
    assert "\n" not in str(info.value)


def test_pkcs12_stores_as_java_clients_configure_them(pki: Pki, tmp_path: Path) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    security = ClientSecurity.from_properties({
        "security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(stores.truststore),
        "ssl.truststore.password": stores.password, "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(stores.client_keystore),
        "ssl.keystore.password": stores.password, "ssl.key.password": stores.password})
    assert security.ssl_context is not None
    # the trust store replaces the system's CAs: only the test CA is trusted
    assert [c["subject"] for c in security.ssl_context.get_ca_certs()] == \
        [((("commonName", "ca"),),)]
