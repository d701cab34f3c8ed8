"""klog/protocol/keystores.py: store formats told apart by their bytes; PKCS12 key and
trust stores (made by the openssl command line, and by Java's keytool) as PEM."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from klog.protocol import keystores
from tests.daemon.security.certs import Pki, make_pkcs12_stores


def test_store_format_by_the_bytes(pki: Pki, tmp_path: Path) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    assert keystores.store_format(pki.server_keystore.read_bytes()) == "PEM"
    assert keystores.store_format(stores.server_keystore.read_bytes()) == "PKCS12"
    assert keystores.store_format(b"\xfe\xed\xfe\xed" + bytes(60)) == "JKS"


def test_key_store_becomes_an_encrypted_key_and_its_chain(pki: Pki, tmp_path: Path) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    pem, passphrase = keystores.pkcs12_key_and_chain(stores.server_keystore.read_bytes(),
                                                     stores.password)
    assert "-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem  # never in clear on disk
    assert pem.count("-----BEGIN CERTIFICATE-----") == 2  # server and CA
    path = tmp_path / "out.pem"
    path.write_text(pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(path), password=passphrase)
    with pytest.raises(ssl.SSLError):
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(path), password="wrong")


def test_trust_store_certificates(pki: Pki, tmp_path: Path) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    pem = keystores.pkcs12_certificates(stores.truststore.read_bytes(), stores.password)
    assert pem.count("-----BEGIN CERTIFICATE-----") == 1
    context = ssl.create_default_context(cadata=pem)
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "ca"),),)]


@pytest.mark.parametrize("password", ["wrong", None])
def test_wrong_password_is_one_clear_error(pki: Pki, tmp_path: Path,
                                           password: str | None) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    for read in (keystores.pkcs12_key_and_chain, keystores.pkcs12_certificates):
        with pytest.raises(keystores.KeyStoreError, match="wrong password") as info:
            read(stores.server_keystore.read_bytes(), password)
        assert "\n" not in str(info.value)


def test_a_trust_store_is_not_a_key_store(pki: Pki, tmp_path: Path) -> None:
    stores = make_pkcs12_stores(pki, tmp_path)
    with pytest.raises(keystores.KeyStoreError, match="no private key"):
        keystores.pkcs12_key_and_chain(stores.truststore.read_bytes(), stores.password)
    with pytest.raises(keystores.KeyStoreError, match="not a PKCS12"):
        keystores.pkcs12_certificates(b"garbage", "x")


def test_trust_store_written_by_java_keytool(pki: Pki, tmp_path: Path) -> None:
    # keytool marks trusted certificates with Java's own attribute; `make setup` installs a
    # Java runtime (ZooKeeper needs one), and keytool comes with it.
    keytool = shutil.which("keytool")
    if keytool is None:
        pytest.skip("keytool (Java runtime) not installed; make setup installs it")
    store = tmp_path / "java-trust.p12"
    subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "ca", "-file",
                    str(pki.ca_cert), "-keystore", str(store), "-storetype", "PKCS12",
                    "-storepass", "java-secret"], check=True, capture_output=True, timeout=60)
    pem = keystores.pkcs12_certificates(store.read_bytes(), "java-secret")
    assert ssl.create_default_context(cadata=pem).get_ca_certs()[0]["subject"] \
        == ((("commonName", "ca"),),)
