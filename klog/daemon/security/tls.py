"""TLS for SSL and SASL_SSL listeners: the server's ``ssl.SSLContext`` from Kafka's configs.

Owns turning a listener's ``ssl.*`` settings (each overridable per listener as
``listener.name.<listener>.ssl.*``, read through ``BrokerConfig.security_value``) into a
server-side SSLContext, and every refusal of a setting klog cannot honour, as one
``TlsConfigError`` line naming the config key:

- key store: ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (private key and
  certificate chain in one PEM file) or ``ssl.keystore.key`` + ``ssl.keystore.certificate.
  chain`` inline; ``ssl.key.password`` decrypts an encrypted key.
  ``ssl.keystore.type=PKCS12`` with ``ssl.keystore.password`` (klog/protocol/keystores.py,
  through the ``cryptography`` package). JKS, which no well-kept Python library reads, is
  refused with the keytool command that converts it to PKCS12. The default type is
  Kafka's (JKS); a file is read as what its bytes say it is (PEM, PKCS12 or JKS), as a
  PKCS12 store named JKS is what Java's own default keystore.type has been since Java 9.
- trust store: ``ssl.truststore.location`` (PEM or PKCS12, with
  ``ssl.truststore.password``) / ``ssl.truststore.certificates`` (PEM); without one, the
  system's CAs (as Kafka uses the JVM's).
- ``ssl.client.auth`` none / requested / required -> CERT_NONE / CERT_OPTIONAL /
  CERT_REQUIRED; ``ssl.protocol`` and ``ssl.enabled.protocols`` bound the TLS versions;
  ``ssl.cipher.suites`` takes OpenSSL names or the IANA names Java uses (TLS 1.2 and
  older: TLS 1.3's suites cannot be restricted through Python's ``ssl`` and are always
  on).

Also Kafka's checks of the key store (SslFactory), which need a TLS handshake or the
certificate itself: ``check_handshake`` runs one in memory between a server and a client
context, as Kafka's SslEngineValidator does for the inter-broker listener (its key store
must be verifiable with its own trust store: brokers connect to each other with them, so
an expired or untrusted certificate fails here rather than between brokers);
``check_keystore_update`` is what a dynamic key store change must pass (no trust store
added where there was none, the certificate's DN and subject alternative names kept unless
``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``, and on the inter-broker listener the
handshakes old server <-> new client and new server <-> old client); ``keystore_certificate``
gives the key store's certificate (security/x509.py), whose dates the broker warns about.

The client side (klog's CLI tools, inter-broker connections) is klog/client/security.py.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from klog.client.security import load_pem_chain
from klog.daemon.security.x509 import Certificate, CertificateError, first_pem_certificate
from klog.protocol import keystores

#: ssl.client.auth -> what the server asks of a client's certificate.
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}

#: Java's protocol names (ssl.protocol, ssl.enabled.protocols) -> Python's TLS versions.
_VERSIONS = {
    "TLSV1": ssl.TLSVersion.TLSv1,
    "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1.2": ssl.TLSVersion.TLSv1_2,
    "TLSV1.3": ssl.TLSVersion.TLSv1_3,
}
#: ssl.protocol values that name a family rather than one version (Java's "TLS", "SSL").
_ANY_VERSION = ("TLS", "SSL")


class TlsConfigError(ValueError):
    """A TLS setting klog cannot honour (one line naming the config key)."""


#: How a listener's value of a security config is read: name -> typed value or None.
Lookup = Callable[[str], Any]


def server_context(lookup: Lookup, source: Callable[[str], str] = lambda n: n
                   ) -> ssl.SSLContext:
    """The SSLContext of one TLS listener. ``lookup(name)`` is the listener's value of
    ``name``; ``source(name)`` the key it came from (named in errors)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, lookup, source)
    _ciphers(context, lookup, source)
    _load_keystore(context, lookup, source)
    client_auth = str(lookup("ssl.client.auth") or "none").lower()
    context.verify_mode = _CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(context, lookup, source)
    # One TLS connection per client connection, long-lived: session tickets buy nothing
    # and would be one more secret to rotate.
    context.options |= ssl.OP_NO_TICKET
    return context


# -- versions and ciphers --------------------------------------------------------------------


def _versions(context: ssl.SSLContext, lookup: Lookup, source: Callable[[str], str]) -> None:
    protocol = str(lookup("ssl.protocol") or "TLSv1.3").upper()
    if protocol not in _VERSIONS and protocol not in _ANY_VERSION:
        raise TlsConfigError(f"{source('ssl.protocol')}={lookup('ssl.protocol')}: unknown "
                             f"TLS protocol (one of TLSv1.2, TLSv1.3, TLS)")
    enabled: Sequence[str] = lookup("ssl.enabled.protocols") or ()
    versions = []
    for name in enabled:
        version = _VERSIONS.get(name.strip().upper())
        if version is None:
            raise TlsConfigError(f"{source('ssl.enabled.protocols')}: unknown TLS version "
                                 f"{name!r} (TLSv1, TLSv1.1, TLSv1.2, TLSv1.3)")
        versions.append(version)
    if not versions:  # Kafka: the ssl.protocol's own version
        versions = [_VERSIONS.get(protocol, ssl.TLSVersion.TLSv1_3)]
    try:
        context.minimum_version = min(versions)
        context.maximum_version = max(versions)
    except (ValueError, ssl.SSLError) as exc:
        raise TlsConfigError(f"{source('ssl.enabled.protocols')}: {exc}") from None


def _ciphers(context: ssl.SSLContext, lookup: Lookup, source: Callable[[str], str]) -> None:
    suites: Sequence[str] = lookup("ssl.cipher.suites") or ()
    names = [s.strip() for s in suites if s.strip()]
    if not names:
        return
    openssl = [openssl_cipher_name(n) for n in names if not _is_tls13_suite(n)]
    if not openssl:
        return  # only TLS 1.3 suites: always enabled
    try:
        context.set_ciphers(":".join(openssl))
    except ssl.SSLError:
        raise TlsConfigError(f"{source('ssl.cipher.suites')}: none of {', '.join(names)} is a "
                             f"cipher suite this OpenSSL knows") from None


def _is_tls13_suite(name: str) -> bool:
    return name.upper() in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                            "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                            "TLS_AES_128_CCM_8_SHA256")


_IANA_RE = re.compile(r"TLS_(?P<kx>[A-Z0-9_]+?)_WITH_(?P<cipher>[A-Z0-9_]+)_(?P<mac>SHA\d*)")


def openssl_cipher_name(name: str) -> str:
    """An IANA cipher suite name (Java's, ``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``) as
    OpenSSL names it (``ECDHE-RSA-AES128-GCM-SHA256``); other names are returned as
    they are (already OpenSSL's)."""
    match = _IANA_RE.fullmatch(name.strip().upper())
    if match is None:
        return name.strip()
    kx = {"RSA": "", "ECDHE_RSA": "ECDHE-RSA", "ECDHE_ECDSA": "ECDHE-ECDSA",
          "DHE_RSA": "DHE-RSA"}.get(match["kx"], match["kx"].replace("_", "-"))
    cipher = match["cipher"]
    mac = match["mac"]
    aes = re.fullmatch(r"AES_(128|256)_(GCM|CBC|CCM)", cipher)
    if aes is not None:
        bits, mode = aes.groups()
        if mode == "GCM":
            body = f"AES{bits}-GCM-{mac}"
        elif mode == "CCM":
            body = f"AES{bits}-CCM"
        else:
            body = f"AES{bits}-{mac}"
    elif cipher == "CHACHA20_POLY1305":
        body = "CHACHA20-POLY1305"
    else:
        body = f"{cipher.replace('_', '-')}-{mac}"
    return f"{kx}-{body}" if kx else body


# -- key and trust stores ------------------------------------------------------------------


def _load_keystore(context: ssl.SSLContext, lookup: Lookup,
                   source: Callable[[str], str]) -> None:
    store_type = str(lookup("ssl.keystore.type") or "JKS").upper()
    location = lookup("ssl.keystore.location")
    key = lookup("ssl.keystore.key")
    chain = lookup("ssl.keystore.certificate.chain")
    key_password = lookup("ssl.key.password")
    if key is not None or chain is not None:
        if store_type != "PEM":
            raise TlsConfigError(f"{source('ssl.keystore.key')} and "
                                 f"{source('ssl.keystore.certificate.chain')} need "
                                 f"ssl.keystore.type=PEM")
        if key is None or chain is None:
            raise TlsConfigError(f"set both {source('ssl.keystore.key')} and "
                                 f"{source('ssl.keystore.certificate.chain')}")
        if location is not None:
            raise TlsConfigError(f"set either {source('ssl.keystore.location')} or the "
                                 "inline ssl.keystore.key/certificate.chain, not both")
        _load_pem_chain(context, f"{key.strip()}\n{chain.strip()}\n", key_password,
                        source("ssl.keystore.key"), text=True)
        return
    if location is None:
        raise TlsConfigError(f"a TLS listener needs a key store: set "
                             f"{source('ssl.keystore.location')} (ssl.keystore.type=PEM: "
                             "private key and certificate chain in one PEM file)")
    try:
        with open(location, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TlsConfigError(f"{source('ssl.keystore.location')}={location}: cannot read: "
                             f"{exc.strerror or exc}") from None
    found = _store_format(data, store_type, source("ssl.keystore.type"),
                          source("ssl.keystore.location"))
    if found == "PEM":
        _load_pem_chain(context, location, key_password or lookup("ssl.keystore.password"),
                        source("ssl.keystore.location"))
        return
    store_password = lookup("ssl.keystore.password")
    try:
        pem, passphrase = keystores.pkcs12_key_and_chain(data, store_password or key_password)
    except keystores.KeyStoreError as exc:
        raise TlsConfigError(f"{source('ssl.keystore.location')}={location}: {exc}") from None
    _load_pem_chain(context, pem, passphrase, source("ssl.keystore.location"), text=True)


def _store_format(data: bytes, store_type: str, type_key: str, location_key: str) -> str:
    """PEM or PKCS12: what a store file is, checked against its configured type; a JKS
    file is refused."""
    if store_type not in ("PEM", "PKCS12", "JKS"):
        raise TlsConfigError(f"{type_key}={store_type}: unknown store type (PEM, PKCS12 "
                             "or JKS)")
    found = keystores.store_format(data)
    if found == "JKS":
        raise TlsConfigError(f"{location_key}: a JKS store, which klog cannot read; "
                             f"convert it to PKCS12 ({keystores.JKS_TO_PKCS12}) or PEM")
    # Kafka's default type is JKS, and Java reads PKCS12 under that name: take a file for
    # what it is then. A type set to PEM or PKCS12 must match.
    if store_type != "JKS" and found != store_type:
        raise TlsConfigError(f"{location_key}: not a {store_type} file (it looks like "
                             f"{found}); set {type_key}={found}")
    return found


def _load_pem_chain(context: ssl.SSLContext, pem: str, password: str | None,
                    key_name: str, *, text: bool = False) -> None:
    """Load a private key and its certificate chain from a PEM file, or PEM ``text``."""
    try:
        if text:
            load_pem_chain(context, pem, password)
        else:
            context.load_cert_chain(pem, password=password)
    except ssl.SSLError as exc:
        hint = (" (wrong ssl.key.password?)" if "decrypt" in str(exc).lower()
                or "bad" in str(exc).lower() else "")
        raise TlsConfigError(f"{key_name}: not a PEM private key and certificate chain "
                             f"klog can load: {exc.reason or exc}{hint}") from None
    except OSError as exc:
        raise TlsConfigError(f"{key_name}: {exc.strerror or exc}") from None


def _load_truststore(context: ssl.SSLContext, lookup: Lookup,
                     source: Callable[[str], str],
                     purpose: ssl.Purpose = ssl.Purpose.CLIENT_AUTH) -> None:
    store_type = str(lookup("ssl.truststore.type") or "JKS").upper()
    location = lookup("ssl.truststore.location")
    inline = lookup("ssl.truststore.certificates")
    try:
        if inline is not None:
            context.load_verify_locations(cadata=inline)
        elif location is not None:
            with open(location, "rb") as f:
                data = f.read()
            found = _store_format(data, store_type, source("ssl.truststore.type"),
                                  source("ssl.truststore.location"))
            if found == "PEM":
                context.load_verify_locations(cafile=location)
            else:
                try:
                    pem = keystores.pkcs12_certificates(data,
                                                        lookup("ssl.truststore.password"))
                except keystores.KeyStoreError as exc:
                    raise TlsConfigError(f"{source('ssl.truststore.location')}={location}: "
                                         f"{exc}") from None
                context.load_verify_locations(cadata=pem)
        else:
            context.load_default_certs(purpose)
    except ssl.SSLError as exc:
        key = (source("ssl.truststore.certificates") if inline is not None
               else source("ssl.truststore.location"))
        raise TlsConfigError(f"{key}: cannot load trusted certificates: "
                             f"{exc.reason or exc}") from None
    except OSError as exc:
        raise TlsConfigError(f"{source('ssl.truststore.location')}={location}: cannot "
                             f"read: {exc.strerror or exc}") from None


# -- Kafka's key store checks ----------------------------------------------------------------


def keystore_certificate(lookup: Lookup) -> Certificate | None:
    """The key store's own (first) certificate, None when it cannot be read or decoded
    (``server_context`` says why, when that matters)."""
    chain = lookup("ssl.keystore.certificate.chain")
    try:
        if chain is not None:
            return first_pem_certificate(str(chain))
        location = lookup("ssl.keystore.location")
        if location is None:
            return None
        with open(location, "rb") as f:
            data = f.read()
        if keystores.store_format(data) == "PKCS12":
            pem, _passphrase = keystores.pkcs12_key_and_chain(
                data, lookup("ssl.keystore.password") or lookup("ssl.key.password"))
            return first_pem_certificate(pem)
        return first_pem_certificate(data.decode("ascii", errors="replace"))
    except (OSError, CertificateError, keystores.KeyStoreError):
        return None


def has_truststore(lookup: Lookup) -> bool:
    return (lookup("ssl.truststore.location") is not None
            or lookup("ssl.truststore.certificates") is not None)


def validation_client_context(lookup: Lookup, source: Callable[[str], str] = lambda n: n
                              ) -> ssl.SSLContext:
    """A client context from a listener's own settings, as Kafka's SslEngineValidator
    makes its client engine: the listener's trust store (the system's CAs without one), its
    key store presented as the client certificate, no host name check."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    _versions(context, lookup, source)
    _ciphers(context, lookup, source)
    _load_keystore(context, lookup, source)
    _load_truststore(context, lookup, source, ssl.Purpose.SERVER_AUTH)
    return context


def check_handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    """A TLS handshake between ``server`` and ``client`` in memory; TlsConfigError with
    OpenSSL's reason when either side refuses the other (an expired certificate, one the
    trust store does not vouch for, no common version or cipher)."""
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    ends = {"client": client.wrap_bio(client_in, client_out, server_side=False),
            "server": server.wrap_bio(server_in, server_out, server_side=True)}
    done = {"server": False, "client": False}
    # A TLS 1.3 handshake takes two round trips (three flights); more means a stall.
    for _ in range(8):
        for side, end in ends.items():
            if done[side]:
                continue
            try:
                end.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as exc:
                reason = (exc.verify_message if isinstance(exc, ssl.SSLCertVerificationError)
                          else exc.reason or str(exc))
                raise TlsConfigError(f"the {side} side refused the handshake: {reason}"
                                     ) from None
            server_in.write(client_out.read())
            client_in.write(server_out.read())
        if done["server"] and done["client"]:
            return
    raise TlsConfigError("the handshake did not complete")


def check_keystore_update(
        old: Lookup, new: Lookup, source: Callable[[str], str], inter_broker: bool,
        current: tuple[Certificate | None, ssl.SSLContext | None, ssl.SSLContext | None]
        | None = None) -> None:
    """What Kafka's SslFactory.validateReconfiguration checks of a listener's new TLS
    settings; TlsConfigError (one line) for the first refusal. ``current``: the running
    listener's certificate, server context and inter-broker validation client as they
    were built -- what the old settings meant, when their files have been rewritten in
    place since (else they are read again from the old settings)."""
    new_server = server_context(new, source)
    if not has_truststore(old) and has_truststore(new):
        raise TlsConfigError("cannot add an SSL trust store to an existing listener for "
                             "which no trust store was configured")
    built_cert, built_server, built_client = current or (None, None, None)
    old_cert = built_cert if built_cert is not None else keystore_certificate(old)
    new_cert = keystore_certificate(new)
    if old_cert is not None and new_cert is not None:
        if not _flag(new("ssl.allow.dn.changes")) and not new_cert.same_dn(old_cert):
            raise TlsConfigError(
                f"key store distinguished name does not match: existing {old_cert.dn}, new "
                f"{new_cert.dn} (set {source('ssl.allow.dn.changes')}=true to allow it)")
        if not _flag(new("ssl.allow.san.changes")) \
                and not new_cert.subject_alt_names >= old_cert.subject_alt_names:
            raise TlsConfigError(
                f"key store subject alternative names do not match: existing "
                f"[{old_cert.san_text()}], new [{new_cert.san_text()}] (set "
                f"{source('ssl.allow.san.changes')}=true to allow it)")
    if inter_broker:
        old_server = built_server if built_server is not None else server_context(old, source)
        old_client = (built_client if built_client is not None
                      else validation_client_context(old, source))
        try:
            check_handshake(old_server, validation_client_context(new, source))
            check_handshake(new_server, old_client)
        except TlsConfigError as exc:
            raise TlsConfigError(f"the new key store and trust store of the inter-broker "
                                 f"listener cannot connect to the old ones: {exc}") from None


def _flag(value: object) -> bool:
    return value is True or str(value).lower() == "true"
