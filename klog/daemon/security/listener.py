"""A listener's security, assembled from its configs (Kafka's ChannelBuilders).

Owns turning one listener's security protocol and its (listener-prefixed) configs into
``ListenerSecurity``: the TLS server context (SSL, SASL_SSL; security/tls.py), the SASL
server settings (SASL_PLAINTEXT, SASL_SSL; security/sasl.py) with the PLAIN users of its
JAAS config and the SCRAM credential cache, and the principal mapping of client
certificates (SSL; security/ssl_principal.py). Every setting klog cannot honour is a
``ListenerConfigError`` at start-up, one line naming the listener and the key. As Kafka's
SslFactory, the inter-broker listener's key store must pass a TLS handshake with its own
trust store (an expired or untrusted certificate is refused here, not between brokers).

Also what a dynamic change of a listener's TLS settings must pass
(``check_reconfiguration``: Kafka's SslFactory.validateReconfiguration), and the warning
for a key store certificate that has expired or is not valid yet
(``certificate_warning``): Kafka serves such a certificate without a word, and clients
then refuse every connection.

Also the broker's own client side of the inter-broker listener
(``inter_broker_client_security``): its TLS trust and key store, and the JAAS
``username``/``password`` options of sasl.mechanism.inter.broker.protocol, as Kafka's
brokers log in to each other.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

from klog.client.security import ClientSecurity, SecurityConfigError, tls_context
from klog.daemon.config import BrokerConfig, Endpoint
from klog.daemon.security import tls
from klog.daemon.security.credentials import ScramCredentialCache
from klog.daemon.security.sasl import (
    PLAIN,
    SaslConfigError,
    SaslServerConfig,
    check_mechanisms,
)
from klog.daemon.security.ssl_principal import SslPrincipalMapper
from klog.daemon.security.x509 import Certificate
from klog.protocol.jaas import (
    PLAIN_LOGIN_MODULE,
    JaasConfigError,
    JaasEntry,
    parse_jaas_config,
)

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class ListenerConfigError(ValueError):
    """A listener whose security settings klog cannot serve (one line)."""


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    listener_name: str
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslServerConfig | None = None
    #: SSL listeners: a verified client certificate's DN -> the principal's name.
    principal_mapper: SslPrincipalMapper | None = None
    failed_authentication_delay_ms: int = 100
    #: TLS: the key and trust store files as they were when this was built (path,
    #: modification time, size): a dynamic update naming the same files rebuilds the
    #: listener when they have changed since, as Kafka's SslFactory.shouldBeRebuilt does.
    store_stamps: tuple[tuple[str, int, int], ...] = ()
    #: TLS: the key store's certificate and the client context the inter-broker check
    #: used, as built: what a rotation in place is checked against once the files are gone.
    certificate: Certificate | None = None
    validation_client: ssl.SSLContext | None = None


#: The files a TLS listener reads: rewritten in place, they are a change.
_STORE_FILES = ("ssl.keystore.location", "ssl.truststore.location")


def store_stamps(config: BrokerConfig, listener: str) -> tuple[tuple[str, int, int], ...]:
    """(path, modification time in ns, size) of each store file a listener names; -1s for
    one that cannot be read."""
    out = []
    for key in _STORE_FILES:
        path = config.security_value(listener, key)
        if path is None:
            continue
        try:
            stat = os.stat(str(path))
            out.append((str(path), stat.st_mtime_ns, stat.st_size))
        except OSError:
            out.append((str(path), -1, -1))
    return tuple(out)


def listener_security(config: BrokerConfig, endpoint: Endpoint,
                      credentials: ScramCredentialCache | None = None) -> ListenerSecurity:
    name, protocol = endpoint.listener_name, endpoint.security_protocol
    delay = config.get("connection.failed.authentication.delay.ms")
    if protocol == "PLAINTEXT":
        return ListenerSecurity(name, protocol, failed_authentication_delay_ms=delay)

    def lookup(key: str) -> object:
        return config.security_value(name, key)

    def source(key: str) -> str:
        return config.security_source(name, key)

    stamps = store_stamps(config, name) if protocol in TLS_PROTOCOLS else ()
    validation_client = None
    try:
        context = tls.server_context(lookup, source) if protocol in TLS_PROTOCOLS else None
        if context is not None and name == config.inter_broker_listener_name:
            try:
                validation_client = tls.validation_client_context(lookup, source)
                tls.check_handshake(context, validation_client)
            except tls.TlsConfigError as exc:
                raise tls.TlsConfigError(
                    f"the inter-broker listener's key store cannot be verified with its "
                    f"trust store: {exc}") from None
        sasl = _sasl_config(config, name, credentials) if protocol in SASL_PROTOCOLS else None
        mapper = None
        if protocol == "SSL":
            rules = str(lookup("ssl.principal.mapping.rules") or "DEFAULT")
            try:
                mapper = SslPrincipalMapper(rules)
            except ValueError as exc:
                raise ListenerConfigError(f"{source('ssl.principal.mapping.rules')}: {exc}"
                                          ) from None
    except (tls.TlsConfigError, SaslConfigError, JaasConfigError) as exc:
        raise ListenerConfigError(f"listener {name} ({protocol}): {exc}") from None
    except ListenerConfigError as exc:
        raise ListenerConfigError(f"listener {name} ({protocol}): {exc}") from None
    certificate = tls.keystore_certificate(lookup) if context is not None else None
    return ListenerSecurity(name, protocol, context, sasl, mapper, delay, stamps, certificate,
                            validation_client)


def check_reconfiguration(old: BrokerConfig, new: BrokerConfig, endpoint: Endpoint,
                          current: ListenerSecurity | None = None) -> None:
    """ListenerConfigError (one line) when a dynamic change of a TLS listener's settings
    would not be taken by Kafka: a trust store added where there was none, the key store's
    certificate changing its distinguished name or dropping subject alternative names
    (unless ssl.allow.dn.changes / ssl.allow.san.changes), and on the inter-broker listener
    a key store and trust store that cannot complete a handshake with the old ones."""
    name, protocol = endpoint.listener_name, endpoint.security_protocol
    if protocol not in TLS_PROTOCOLS:
        return
    try:
        tls.check_keystore_update(
            lambda key: old.security_value(name, key),
            lambda key: new.security_value(name, key),
            lambda key: new.security_source(name, key),
            inter_broker=name == new.inter_broker_listener_name,
            current=None if current is None else (current.certificate, current.ssl_context,
                                                  current.validation_client))
    except tls.TlsConfigError as exc:
        raise ListenerConfigError(f"listener {name} ({protocol}): {exc}") from None


def certificate_warning(config: BrokerConfig, endpoint: Endpoint) -> str | None:
    """One line when a TLS listener's key store certificate has expired or is not valid
    yet (clients refuse it), else None."""
    if endpoint.security_protocol not in TLS_PROTOCOLS:
        return None
    name = endpoint.listener_name
    certificate = tls.keystore_certificate(lambda key: config.security_value(name, key))
    problem = None if certificate is None else certificate.validity_problem()
    if certificate is None or problem is None:
        return None
    key = ("ssl.keystore.certificate.chain"
           if config.security_value(name, "ssl.keystore.certificate.chain") is not None
           else "ssl.keystore.location")
    return (f"listener {name} ({endpoint.security_protocol}): the key store certificate "
            f"{certificate.dn} {problem}; clients will refuse to connect until "
            f"{config.security_source(name, key)} holds a valid one")


def _sasl_config(config: BrokerConfig, listener: str,
                 credentials: ScramCredentialCache | None) -> SaslServerConfig:
    mechanisms = check_mechanisms(
        config.security_value(listener, "sasl.enabled.mechanisms") or (),
        config.security_source(listener, "sasl.enabled.mechanisms"))
    plain_users: dict[str, str] = {}
    if PLAIN in mechanisms:
        entry = jaas_entry(config, listener, PLAIN)
        if entry is None or entry.login_module != PLAIN_LOGIN_MODULE:
            raise SaslConfigError(
                f"PLAIN needs listener.name.{listener.lower()}.plain.sasl.jaas.config (or "
                f"sasl.jaas.config) with {PLAIN_LOGIN_MODULE} and user_<name>=\"<password>\" "
                "entries")
        plain_users = entry.plain_users
    lookup = (credentials.get if credentials is not None
              else (lambda _user, _mechanism: None))
    return SaslServerConfig(
        mechanisms=mechanisms,
        plain_users=plain_users,
        scram_credential=lookup,
        reauth_ms=int(config.security_value(listener, "connections.max.reauth.ms") or 0),
        max_receive_size=int(config.security_value(listener, "sasl.server.max.receive.size")),
    )


def jaas_entry(config: BrokerConfig, listener: str, mechanism: str) -> JaasEntry | None:
    """The JAAS login module a listener uses for ``mechanism``
    (listener.name.<l>.<mechanism>.sasl.jaas.config, else sasl.jaas.config)."""
    text = config.security_value(listener, "sasl.jaas.config", mechanism)
    if text is None:
        return None
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    return parse_jaas_config(str(text), key if key in config.originals else "sasl.jaas.config")


def inter_broker_credentials(config: BrokerConfig) -> tuple[str, str, str] | None:
    """(mechanism, username, password) this broker authenticates with on the inter-broker
    listener, None when that listener is not SASL. ListenerConfigError when the JAAS
    config lacks them."""
    name = config.inter_broker_listener_name
    endpoint = next((e for e in config.listeners if e.listener_name == name), None)
    if endpoint is None or endpoint.security_protocol not in SASL_PROTOCOLS:
        return None
    mechanism = str(config.get("sasl.mechanism.inter.broker.protocol")).upper()
    enabled = [m.strip().upper() for m in
               config.security_value(name, "sasl.enabled.mechanisms") or ()]
    if mechanism not in enabled:
        raise ListenerConfigError(
            f"sasl.mechanism.inter.broker.protocol {mechanism} must be one of the enabled "
            f"mechanisms of the inter-broker listener {name} ({', '.join(enabled)})")
    try:
        entry = jaas_entry(config, name, mechanism)
    except JaasConfigError as exc:
        raise ListenerConfigError(str(exc)) from None
    if entry is None or "username" not in entry.options or "password" not in entry.options:
        raise ListenerConfigError(
            f"inter-broker listener {name}: sasl.mechanism.inter.broker.protocol is "
            f"{mechanism}; its JAAS config (listener.name.{name.lower()}."
            f"{mechanism.lower()}.sasl.jaas.config) needs username and password")
    return mechanism, entry.options["username"], entry.options["password"]


def inter_broker_client_security(config: BrokerConfig) -> ClientSecurity | None:
    """How this broker connects to other brokers' inter-broker listener (the replica
    fetchers, the controller channel, controlled shutdown): that listener's protocol; TLS
    trusting its ssl.truststore.* and presenting its key store (for ssl.client.auth);
    SASL with sasl.mechanism.inter.broker.protocol and the JAAS username/password, as
    Kafka's brokers log in. None for PLAINTEXT. ListenerConfigError when unusable."""
    name = config.inter_broker_listener_name
    protocol = config.listener_security_protocol_map.get(name, "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return None

    def value(key: str) -> object:
        return config.security_value(name, key)

    context = None
    check_hostname = str(value("ssl.endpoint.identification.algorithm") or "").lower() \
        not in ("", "none")
    if protocol in TLS_PROTOCOLS:
        def text(key: str) -> str | None:
            found = value(key)
            return None if found is None else str(found)

        try:
            context = tls_context(
                truststore=text("ssl.truststore.location"),
                truststore_type=text("ssl.truststore.type"),
                truststore_password=text("ssl.truststore.password"),
                truststore_pem=text("ssl.truststore.certificates"),
                keystore=text("ssl.keystore.location"),
                keystore_type=text("ssl.keystore.type"),
                keystore_password=text("ssl.keystore.password"),
                key_password=text("ssl.key.password"), check_hostname=check_hostname)
        except SecurityConfigError as exc:
            raise ListenerConfigError(f"inter-broker listener {name}: {exc}") from None
    mechanism = username = password_ = None
    if protocol in SASL_PROTOCOLS:
        credentials = inter_broker_credentials(config)
        assert credentials is not None
        mechanism, username, password_ = credentials
    return ClientSecurity(protocol, context, check_hostname, mechanism, username, password_)
