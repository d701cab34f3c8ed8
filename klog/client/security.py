"""The client's security settings: TLS and SASL for klog's own connections to brokers.

Owns ``ClientSecurity`` -- the security protocol, the TLS context, and the SASL mechanism
with its credentials -- built from the client config names both Kafka clients use
(``from_properties``: a ``--command-config`` file, or the broker's own inter-broker
settings):

- ``security.protocol`` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
- ``sasl.mechanism`` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with ``sasl.username`` /
  ``sasl.password`` (librdkafka's names) or ``sasl.jaas.config`` (Java's: the login
  module's ``username`` and ``password`` options);
- ``ssl.ca.location`` or ``ssl.truststore.location`` (PEM, or PKCS12 with
  ``ssl.truststore.password``) for the CA, ``ssl.certificate.location`` +
  ``ssl.key.location`` (or an ``ssl.keystore.location`` holding both: PEM, or PKCS12 with
  ``ssl.keystore.password``) for a client certificate, ``ssl.key.password``,
  ``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the broker's
  host name; empty or ``none`` does not).

``authenticate`` runs the SASL exchange on a connection after ApiVersions, as Kafka's
clients do: SaslHandshake v1, then SaslAuthenticate requests carrying the mechanism's
tokens (klog/protocol/scram.py for SCRAM).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from klog.protocol import keystores, scram
from klog.protocol.jaas import JaasConfigError, parse_jaas_config

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", *scram.MECHANISMS)
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

#: Client settings this module reads (others in a --command-config file are reported).
KNOWN_SETTINGS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
    "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.location",
    "ssl.truststore.type", "ssl.certificate.location", "ssl.key.location",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.key.password",
    "ssl.keystore.password", "ssl.truststore.password",
    "ssl.endpoint.identification.algorithm",
})


class SecurityConfigError(ValueError):
    """Client security settings that cannot be used (one line naming the key)."""


class SaslAuthenticationError(Exception):
    """The broker refused the credentials (SASL_AUTHENTICATION_FAILED and kin)."""

    def __init__(self, message: str, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol={protocol}: one of "
                                      f"{', '.join(PROTOCOLS)}")
        context = None
        check_hostname = props.get("ssl.endpoint.identification.algorithm",
                                   "https").strip().lower() not in ("", "none")
        if protocol in ("SSL", "SASL_SSL"):
            context = _context(props, check_hostname)
        mechanism = username = password = None
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
            if mechanism not in MECHANISMS:
                raise SecurityConfigError(f"sasl.mechanism={mechanism}: klog's client speaks "
                                          f"{', '.join(MECHANISMS)}")
            username, password = props.get("sasl.username"), props.get("sasl.password")
            if (username is None or password is None) and "sasl.jaas.config" in props:
                try:
                    options = parse_jaas_config(props["sasl.jaas.config"]).options
                except JaasConfigError as exc:
                    raise SecurityConfigError(str(exc)) from None
                username = options.get("username", username)
                password = options.get("password", password)
            if username is None or password is None:
                raise SecurityConfigError(f"sasl.mechanism={mechanism} needs sasl.username "
                                          "and sasl.password (or sasl.jaas.config)")
        return cls(protocol, context, check_hostname, mechanism, username, password)

    async def authenticate(self, request: Callable[[int, int, Mapping[str, Any]],
                                                   Awaitable[Any]],
                           versions: Mapping[int, tuple[int, int]]) -> None:
        """The SASL exchange; ``request(api_key, version, values)`` sends one request on
        the connection and returns its response. SaslAuthenticationError on refusal."""
        assert self.mechanism is not None and self.username is not None
        assert self.password is not None
        if SASL_HANDSHAKE not in versions or SASL_AUTHENTICATE not in versions:
            raise SaslAuthenticationError("the broker does not offer SASL (SaslHandshake v1 "
                                          "and SaslAuthenticate)", 34)
        handshake = await request(SASL_HANDSHAKE, min(1, versions[SASL_HANDSHAKE][1]),
                                  {"mechanism": self.mechanism})
        if handshake.error_code:
            raise SaslAuthenticationError(
                f"SASL mechanism {self.mechanism} refused (the broker offers "
                f"{', '.join(handshake.mechanisms) or 'none'})", int(handshake.error_code))
        version = min(2, versions[SASL_AUTHENTICATE][1])

        async def exchange(token: bytes) -> bytes:
            response = await request(SASL_AUTHENTICATE, version, {"auth_bytes": token})
            if response.error_code:
                raise SaslAuthenticationError(
                    response.error_message or "SASL authentication failed",
                    int(response.error_code))
            return bytes(response.auth_bytes)

        if self.mechanism == "PLAIN":
            await exchange(f"\x00{self.username}\x00{self.password}".encode())
            return
        client = scram.ScramClient(self.mechanism, self.username, self.password)
        try:
            server_first = await exchange(client.first())
            server_final = await exchange(client.final(server_first))
            client.verify(server_final)
        except scram.ScramError as exc:
            raise SaslAuthenticationError(f"SCRAM: {exc}", 58) from None


def _context(props: Mapping[str, str], check_hostname: bool) -> ssl.SSLContext:
    return tls_context(
        truststore=props.get("ssl.ca.location") or props.get("ssl.truststore.location"),
        truststore_type=props.get("ssl.truststore.type"),
        truststore_password=props.get("ssl.truststore.password"),
        keystore=props.get("ssl.certificate.location") or props.get("ssl.keystore.location"),
        keystore_type=props.get("ssl.keystore.type"),
        keystore_password=props.get("ssl.keystore.password"),
        key_file=props.get("ssl.key.location"), key_password=props.get("ssl.key.password"),
        check_hostname=check_hostname)


def tls_context(*, truststore: str | None = None, truststore_type: str | None = None,
                truststore_password: str | None = None, truststore_pem: str | None = None,
                keystore: str | None = None, keystore_type: str | None = None,
                keystore_password: str | None = None, key_file: str | None = None,
                key_password: str | None = None, check_hostname: bool = True
                ) -> ssl.SSLContext:
    """A client's TLS context from Kafka's store settings (also the broker's own, for its
    connections to the inter-broker listener): trusted certificates from a PEM or PKCS12
    trust store (or ``truststore_pem`` text; else the system's CAs), and a client
    certificate from a PEM or PKCS12 key store (or a PEM certificate file with
    ``key_file``). A store is read as what its bytes say; a type set to something else is
    refused, as is JKS. SecurityConfigError names the setting."""
    try:
        # A trust store replaces the system's CAs, as in Kafka's clients.
        cafile, cadata = None, truststore_pem
        if truststore_pem is None and truststore is not None:
            data = _read_store(truststore, "ssl.truststore.location")
            if _store_format(data, truststore_type, "ssl.truststore") == "PEM":
                cafile = truststore
            else:
                cadata = keystores.pkcs12_certificates(data, truststore_password)
        context = ssl.create_default_context(cafile=cafile, cadata=cadata)
        context.check_hostname = check_hostname
        if keystore is None:
            return context
        data = _read_store(keystore, "ssl.keystore.location")
        kind = _store_format(data, keystore_type, "ssl.keystore")
        if kind == "PEM":
            context.load_cert_chain(keystore, key_file, key_password or keystore_password)
            return context
        pem, passphrase = keystores.pkcs12_key_and_chain(data,
                                                         keystore_password or key_password)
        load_pem_chain(context, pem, passphrase)
    except keystores.KeyStoreError as exc:
        raise SecurityConfigError(f"TLS client settings: {exc}") from None
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"TLS client settings: {exc}") from None
    return context


def load_pem_chain(context: ssl.SSLContext, pem: str, password: str | None) -> None:
    """Load a private key and certificate chain given as PEM text: Python's ``ssl`` loads
    them from files only, so they pass through a private temporary file (mkstemp's 0600),
    removed as soon as it has been read."""
    fd, path = tempfile.mkstemp(prefix="klog-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(pem)
        context.load_cert_chain(path, password=password)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _read_store(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise SecurityConfigError(f"TLS client settings: {key}={path}: cannot read: "
                                  f"{exc.strerror or exc}") from None


def _store_format(data: bytes, configured: str | None, prefix: str) -> str:
    found = keystores.store_format(data)
    kind = (configured or found).strip().upper()
    if found == "JKS":
        raise SecurityConfigError(f"{prefix}.location: a JKS store, which klog cannot read; "
                                  f"convert it to PKCS12 ({keystores.JKS_TO_PKCS12}) or PEM")
    if kind not in ("JKS", found):  # JKS: Java's default type, under which it reads PKCS12
        raise SecurityConfigError(f"{prefix}.type={kind}: the file is {found}")
    return found
