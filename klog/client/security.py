"""The client's security settings: TLS and SASL for klog's own connections to brokers.

Owns ``ClientSecurity`` -- the security protocol, the TLS context, and the SASL mechanism
with its credentials -- built from the client config names both Kafka clients use
(``from_properties``: a ``--command-config`` file, or the broker's own inter-broker
settings):

- ``security.protocol`` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL;
- ``sasl.mechanism`` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with ``sasl.username`` /
  ``sasl.password`` (librdkafka's names) or ``sasl.jaas.config`` (Java's: the login
  module's ``username`` and ``password`` options);
- ``ssl.ca.location`` or ``ssl.truststore.location`` (PEM) for the CA,
  ``ssl.certificate.location`` + ``ssl.key.location`` (or a PEM ``ssl.keystore.location``
  holding both) for a client certificate, ``ssl.key.password``,
  ``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the broker's
  host name; empty or ``none`` does not).

``authenticate`` runs the SASL exchange on a connection after ApiVersions, as Kafka's
clients do: SaslHandshake v1, then SaslAuthenticate requests carrying the mechanism's
tokens (klog/protocol/scram.py for SCRAM).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from klog.protocol import scram
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
    cafile = props.get("ssl.ca.location") or props.get("ssl.truststore.location")
    certfile = props.get("ssl.certificate.location") or props.get("ssl.keystore.location")
    keyfile = props.get("ssl.key.location")
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = props.get(key, "PEM").strip().upper()
        if kind != "PEM":
            raise SecurityConfigError(f"{key}={kind}: klog's client reads PEM files only")
    try:
        context = ssl.create_default_context(cafile=cafile)
        context.check_hostname = check_hostname
        if certfile is not None:
            context.load_cert_chain(certfile, keyfile, props.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"TLS client settings: {exc}") from None
    return context
