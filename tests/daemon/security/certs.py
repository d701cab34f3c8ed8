"""Test certificates made with the openssl command line: a CA, a server certificate for
127.0.0.1 and localhost, and client certificates (one signed by the CA, one by a CA the
broker does not trust); server and client certificates signed by the trusted CA that have
expired or are not valid yet. EC P-256 keys: fast to make.

Dated certificates go through ``openssl ca`` with -startdate/-enddate: ``openssl x509
-req`` takes only ``-days`` from now, and its -not_before/-not_after need OpenSSL 3.4."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    #: private key + certificate chain in one PEM file (ssl.keystore.type=PEM)
    server_keystore: Path
    server_key: Path
    server_cert: Path
    client_key: Path
    client_cert: Path
    #: the client certificate's subject as Kafka writes it (RFC 2253)
    client_dn: str
    #: a client certificate signed by a CA the broker does not trust
    rogue_key: Path
    rogue_cert: Path
    #: an encrypted server key store and its password (ssl.key.password)
    encrypted_keystore: Path
    key_password: str
    #: a server key store for 127.0.0.1/localhost signed by the rogue CA, and that CA
    rogue_server_keystore: Path
    rogue_ca_cert: Path
    #: server key stores for 127.0.0.1/localhost signed by the trusted CA: one that expired
    #: yesterday, one valid only from 30 days on
    expired_server_keystore: Path
    future_server_keystore: Path
    #: client certificates signed by the trusted CA: expired, and not valid yet
    expired_client_key: Path
    expired_client_cert: Path
    future_client_key: Path
    future_client_cert: Path
    #: notAfter of the expired certificates, notBefore of the future ones (whole seconds)
    expired_on: datetime
    valid_from: datetime
    #: a server key store for 127.0.0.1/localhost signed by the trusted CA with another
    #: subject (CN=other-broker) and SAN (DNS:other.example) than the server's
    other_name_server_keystore: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key(name: str, cwd: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", name, cwd=cwd)


def _ca(name: str, cwd: Path) -> None:
    _key(f"{name}.key", cwd)
    _openssl("req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.crt",
             "-days", "2", "-subj", f"/CN={name}", cwd=cwd)


def _signed(name: str, subject: str, ca: str, cwd: Path, ext: str | None = None) -> None:
    _key(f"{name}.key", cwd)
    _openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
             cwd=cwd)
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2"]
    if ext is not None:
        (cwd / f"{name}.ext").write_text(ext)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=cwd)


_CA_CONFIG = """\
[ca]
default_ca = klog_test
[klog_test]
database = index.txt
new_certs_dir = .
serial = serial.txt
default_md = sha256
unique_subject = no
policy = any
[any]
countryName = optional
organizationName = optional
organizationalUnitName = optional
commonName = supplied
"""


def _dated(name: str, subject: str, ca: str, cwd: Path, start: datetime, end: datetime,
           ext: str | None = None) -> None:
    """``name``.key and ``name``.crt, signed by ``ca``, valid from ``start`` to ``end``."""
    config = cwd / "ca.cnf"
    if not config.exists():
        config.write_text(_CA_CONFIG)
        (cwd / "index.txt").write_text("")
        (cwd / "serial.txt").write_text("1000\n")
    _key(f"{name}.key", cwd)
    _openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
             cwd=cwd)
    args = ["ca", "-batch", "-notext", "-preserveDN", "-config", "ca.cnf",
            "-cert", f"{ca}.crt", "-keyfile", f"{ca}.key", "-in", f"{name}.csr",
            "-out", f"{name}.crt", "-startdate", _asn1_time(start),
            "-enddate", _asn1_time(end)]
    if ext is not None:
        (cwd / f"{name}.ext").write_text(ext)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=cwd)


def _asn1_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%d%H%M%SZ")


def _keystore(name: str, cwd: Path) -> Path:
    """Private key and certificate in one PEM file (ssl.keystore.type=PEM)."""
    keystore = cwd / f"{name}.keystore.pem"
    keystore.write_text((cwd / f"{name}.key").read_text() + (cwd / f"{name}.crt").read_text())
    return keystore


_SERVER_SAN = "subjectAltName=DNS:localhost,IP:127.0.0.1\n"


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", directory)
    _ca("rogue-ca", directory)
    _signed("server", "/CN=localhost", "ca", directory,
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _signed("client", "/C=US/O=Acme/OU=eng/CN=client", "ca", directory)
    _signed("rogue", "/CN=rogue", "rogue-ca", directory)
    _signed("rogue-server", "/CN=localhost", "rogue-ca", directory,
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    rogue_keystore = directory / "rogue-server.keystore.pem"
    rogue_keystore.write_text((directory / "rogue-server.key").read_text()
                              + (directory / "rogue-server.crt").read_text())
    keystore = directory / "server.keystore.pem"
    keystore.write_text((directory / "server.key").read_text()
                        + (directory / "server.crt").read_text())
    password = "key-secret"
    _openssl("pkcs8", "-topk8", "-in", "server.key", "-out", "server-enc.key",
             "-passout", f"pass:{password}", cwd=directory)
    encrypted = directory / "server-enc.keystore.pem"
    encrypted.write_text((directory / "server-enc.key").read_text()
                         + (directory / "server.crt").read_text())
    now = datetime.now(UTC).replace(microsecond=0)
    expired_on, valid_from = now - timedelta(days=1), now + timedelta(days=30)
    _dated("expired-server", "/CN=localhost", "ca", directory, now - timedelta(days=30),
           expired_on, _SERVER_SAN)
    _dated("future-server", "/CN=localhost", "ca", directory, valid_from,
           now + timedelta(days=60), _SERVER_SAN)
    _dated("expired-client", "/C=US/O=Acme/OU=eng/CN=expired-client", "ca", directory,
           now - timedelta(days=30), expired_on)
    _dated("future-client", "/C=US/O=Acme/OU=eng/CN=future-client", "ca", directory,
           valid_from, now + timedelta(days=60))
    _signed("other-server", "/CN=other-broker", "ca", directory,
            "subjectAltName=DNS:other.example,IP:127.0.0.1\n")
    return Pki(
        ca_cert=directory / "ca.crt",
        server_keystore=keystore,
        server_key=directory / "server.key",
        server_cert=directory / "server.crt",
        client_key=directory / "client.key",
        client_cert=directory / "client.crt",
        client_dn="CN=client,OU=eng,O=Acme,C=US",
        rogue_key=directory / "rogue.key",
        rogue_cert=directory / "rogue.crt",
        encrypted_keystore=encrypted,
        key_password=password,
        rogue_server_keystore=rogue_keystore,
        rogue_ca_cert=directory / "rogue-ca.crt",
        expired_server_keystore=_keystore("expired-server", directory),
        future_server_keystore=_keystore("future-server", directory),
        expired_client_key=directory / "expired-client.key",
        expired_client_cert=directory / "expired-client.crt",
        future_client_key=directory / "future-client.key",
        future_client_cert=directory / "future-client.crt",
        expired_on=expired_on,
        valid_from=valid_from,
        other_name_server_keystore=_keystore("other-server", directory),
    )


@dataclass(frozen=True)
class Pkcs12Stores:
    """The PKI's stores as PKCS12 files (``openssl pkcs12 -export``), all with
    ``password``: Kafka's ssl.keystore.type / ssl.truststore.type=PKCS12."""

    server_keystore: Path  # server key, certificate and the CA's
    client_keystore: Path  # the client certificate's key and certificate
    truststore: Path  # the CA's certificate alone
    password: str


def make_pkcs12_stores(pki: Pki, directory: Path, password: str = "store-secret"
                       ) -> Pkcs12Stores:
    directory.mkdir(parents=True, exist_ok=True)
    stores = Pkcs12Stores(directory / "server.p12", directory / "client.p12",
                          directory / "trust.p12", password)
    _openssl("pkcs12", "-export", "-in", str(pki.server_cert), "-inkey", str(pki.server_key),
             "-certfile", str(pki.ca_cert), "-out", str(stores.server_keystore),
             "-passout", f"pass:{password}", cwd=directory)
    _openssl("pkcs12", "-export", "-in", str(pki.client_cert), "-inkey", str(pki.client_key),
             "-out", str(stores.client_keystore), "-passout", f"pass:{password}",
             cwd=directory)
    _openssl("pkcs12", "-export", "-nokeys", "-in", str(pki.ca_cert),
             "-out", str(stores.truststore), "-passout", f"pass:{password}", cwd=directory)
    return stores
