"""The client's security settings (klog/client/security.py) from client config names."""

from __future__ import annotations

import pytest

from klog.client.security import ClientSecurity, SecurityConfigError
from tests.daemon.security.certs import Pki


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
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "PEM"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "TLS"),
])
def test_unusable_settings(props: dict[str, str], message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message):
        ClientSecurity.from_properties(props)
