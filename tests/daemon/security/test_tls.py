"""The TLS server context from Kafka's ssl.* configs (klog/daemon/security/tls.py)."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.security.tls import (
    TlsConfigError,
    check_handshake,
    check_keystore_update,
    keystore_certificate,
    openssl_cipher_name,
    server_context,
    validation_client_context,
)
from tests.daemon.security.certs import Pki, make_pkcs12_stores


def context(settings: Mapping[str, Any]) -> ssl.SSLContext:
    values = {"ssl.client.auth": "none", "ssl.protocol": "TLSv1.3",
              "ssl.enabled.protocols": ["TLSv1.2", "TLSv1.3"], **settings}
    return server_context(values.get)


def test_pem_keystore_file_and_inline(pki: Pki) -> None:
    ctx = context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore)})
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    inline = context({"ssl.keystore.type": "PEM",
                      "ssl.keystore.key": pki.server_key.read_text(),
                      "ssl.keystore.certificate.chain": pki.server_cert.read_text(),
                      "ssl.client.auth": "required",
                      "ssl.truststore.certificates": pki.ca_cert.read_text()})
    assert inline.verify_mode == ssl.CERT_REQUIRED
    # Kafka's default type (JKS) with a PEM file: read as the PEM it is
    context({"ssl.keystore.location": str(pki.server_keystore)})


def test_pkcs12_key_and_trust_stores(pki: Pki, tmp_path: Path) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    ctx = context({"ssl.keystore.type": "PKCS12",
                   "ssl.keystore.location": str(stores.server_keystore),
                   "ssl.keystore.password": stores.password, "ssl.client.auth": "required",
                   "ssl.truststore.type": "PKCS12",
                   "ssl.truststore.location": str(stores.truststore),
                   "ssl.truststore.password": stores.password})
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "ca"),),)]
    # Kafka's default type (JKS) with a PKCS12 file: read as the PKCS12 it is, as Java does
    context({"ssl.keystore.location": str(stores.server_keystore),
             "ssl.keystore.password": stores.password})
    # its certificate for Kafka's key store checks (DN, SANs, expiry warnings)
    certificate = keystore_certificate({"ssl.keystore.location": str(stores.server_keystore),
                                        "ssl.keystore.password": stores.password}.get)
    assert certificate is not None and certificate.dn == "CN=localhost"


@pytest.mark.parametrize("settings, message", [
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "P12",
      "ssl.keystore.password": "wrong"}, "wrong password"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "PEMSTORE"},
     "ssl.keystore.type=PEM"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "P12"},
     "ssl.keystore.type=PKCS12"),
    ({"ssl.keystore.location": "PEMSTORE", "ssl.client.auth": "required",
      "ssl.truststore.type": "PKCS12", "ssl.truststore.location": "TRUST"},
     "ssl.truststore.location"),
    ({"ssl.keystore.type": "BKS", "ssl.keystore.location": "P12"}, "unknown store type"),
])
def test_pkcs12_refusals_name_the_setting(pki: Pki, tmp_path: Path,
                                          settings: dict[str, str], message: str) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    files = {"P12": str(stores.server_keystore), "PEMSTORE": str(pki.server_keystore),
             "TRUST": str(stores.truststore)}  # the trust store without its password
    with pytest.raises(TlsConfigError) as info:
        context({k: files.get(v, v) for k, v in settings.items()})
    assert message in str(info.value) and "\n" not in str(info.value)


def test_encrypted_key_needs_its_password(pki: Pki) -> None:
    context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.encrypted_keystore),
             "ssl.key.password": pki.key_password})
    with pytest.raises(TlsConfigError, match=r"ssl\.keystore\.location"):
        context({"ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(pki.encrypted_keystore),
                 "ssl.key.password": "wrong"})


@pytest.mark.parametrize("settings, message", [
    ({}, "ssl.keystore.location"),
    ({"ssl.keystore.location": "/nonexistent/ks.pem"}, "cannot read"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "BINARY"}, "PEM"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "BINARY"}, "keytool"),
    ({"ssl.keystore.location": "KEYSTORE", "ssl.protocol": "SSLv3"}, "ssl.protocol"),
    ({"ssl.keystore.location": "KEYSTORE", "ssl.enabled.protocols": ["TLSv9"]}, "TLSv9"),
    ({"ssl.keystore.location": "KEYSTORE", "ssl.cipher.suites": ["NOT_A_SUITE"]},
     "ssl.cipher.suites"),
    ({"ssl.keystore.location": "KEYSTORE", "ssl.client.auth": "required",
      "ssl.truststore.location": "BINARY"}, "ssl.truststore"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.key": "x"}, "both"),
])
def test_settings_klog_cannot_honour_are_one_line_errors(
        pki: Pki, tmp_path: Path, settings: dict[str, Any], message: str) -> None:
    binary = tmp_path / "store.jks"
    binary.write_bytes(b"\xfe\xed\xfe\xed" + bytes(64))
    resolved = {k: (str(binary) if v == "BINARY" else str(pki.server_keystore)
                    if v == "KEYSTORE" else v) for k, v in settings.items()}
    with pytest.raises(TlsConfigError) as info:
        context(resolved)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_java_cipher_names_and_tls13_suites(pki: Pki) -> None:
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") \
        == "ECDHE-RSA-AES128-GCM-SHA256"
    assert openssl_cipher_name("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") \
        == "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert openssl_cipher_name("TLS_RSA_WITH_AES_256_CBC_SHA256") == "AES256-SHA256"
    assert openssl_cipher_name("ECDHE-RSA-AES128-SHA") == "ECDHE-RSA-AES128-SHA"
    ctx = context({"ssl.keystore.location": str(pki.server_keystore),
                   "ssl.cipher.suites": ["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
                                         "TLS_AES_128_GCM_SHA256"]})
    names = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-ECDSA-AES256-GCM-SHA384"}


# -- Kafka's key store checks (SslFactory) -------------------------------------------------


def settings_of(keystore: Path, pki: Pki, **extra: Any) -> Any:
    values = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
              "ssl.truststore.location": str(pki.ca_cert), "ssl.client.auth": "required",
              **{k.replace("_", "."): v for k, v in extra.items()}}
    return values.get


@pytest.mark.parametrize("keystore, reason", [
    ("server_keystore", None),
    ("expired_server_keystore", "certificate has expired"),
    ("future_server_keystore", "certificate is not yet valid"),
    ("rogue_server_keystore", "unable to get local issuer certificate"),
])
def test_handshake_of_a_key_store_with_its_trust_store(pki: Pki, keystore: str,
                                                      reason: str | None) -> None:
    lookup = settings_of(getattr(pki, keystore), pki)
    server, client = server_context(lookup), validation_client_context(lookup)
    if reason is None:
        check_handshake(server, client)
    else:
        with pytest.raises(TlsConfigError, match=reason):
            check_handshake(server, client)


def test_a_client_certificate_out_of_its_validity_fails_the_server_side(pki: Pki) -> None:
    server = server_context(settings_of(pki.server_keystore, pki))
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cafile=str(pki.ca_cert))
    client.check_hostname = False
    client.load_cert_chain(str(pki.expired_client_cert), str(pki.expired_client_key))
    with pytest.raises(TlsConfigError, match=r"server side.*certificate has expired"):
        check_handshake(server, client)


def test_key_store_update_keeps_dn_and_alt_names_unless_allowed(pki: Pki) -> None:
    old = settings_of(pki.server_keystore, pki)
    other = settings_of(pki.other_name_server_keystore, pki)
    with pytest.raises(TlsConfigError, match="distinguished name does not match"):
        check_keystore_update(old, other, lambda n: n, inter_broker=False)
    with pytest.raises(TlsConfigError, match="subject alternative names do not match"):
        check_keystore_update(old, settings_of(pki.other_name_server_keystore, pki,
                                               ssl_allow_dn_changes=True),
                              lambda n: n, inter_broker=False)
    check_keystore_update(old, settings_of(pki.other_name_server_keystore, pki,
                                           ssl_allow_dn_changes=True,
                                           ssl_allow_san_changes=True),
                          lambda n: n, inter_broker=False)
    # the same names, another key pair and CA: taken (the rogue CA is not checked here)
    check_keystore_update(old, settings_of(pki.rogue_server_keystore, pki), lambda n: n,
                          inter_broker=False)


def test_key_store_update_on_the_inter_broker_listener_must_handshake(pki: Pki) -> None:
    old = settings_of(pki.server_keystore, pki)
    for keystore, reason in ((pki.expired_server_keystore, "certificate has expired"),
                             (pki.future_server_keystore, "not yet valid"),
                             (pki.rogue_server_keystore, "local issuer")):
        new = settings_of(keystore, pki)
        check_keystore_update(old, new, lambda n: n, inter_broker=False)  # Kafka: taken
        with pytest.raises(TlsConfigError, match=reason):
            check_keystore_update(old, new, lambda n: n, inter_broker=True)


def test_a_trust_store_cannot_be_added(pki: Pki) -> None:
    old = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore)}.get
    with pytest.raises(TlsConfigError, match="cannot add an SSL trust store"):
        check_keystore_update(old, settings_of(pki.server_keystore, pki), lambda n: n,
                              inter_broker=False)
