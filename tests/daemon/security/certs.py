"""Test certificates made with the openssl command line: a CA, a server certificate for
127.0.0.1 and localhost, and client certificates (one signed by the CA, one by a CA the
broker does not trust). EC P-256 keys: fast to make."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
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
