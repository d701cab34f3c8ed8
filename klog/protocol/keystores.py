"""Kafka's key and trust store files as the PEM text Python's ``ssl`` loads.

Owns telling the store formats Kafka's ``ssl.keystore.type`` / ``ssl.truststore.type`` name
apart by their bytes, and turning a PKCS12 store into PEM: the private key with its
certificate chain (a key store), or the trusted certificates (a trust store, as Java's
keytool writes one). Python's ``ssl`` reads PEM only; PKCS12 is parsed by the PyCA
``cryptography`` package. JKS, Java's own format, has no well-kept Python reader: callers
refuse it with a line saying how keytool converts it to PKCS12.

Pure: bytes in, text out (the daemon's security/tls.py and the client's security.py read
the files). The private key leaves here encrypted with a passphrase made for the occasion,
so that the temporary file ``ssl.SSLContext.load_cert_chain`` needs never holds it in
clear.
"""

from __future__ import annotations

import secrets
from typing import Any

#: The first bytes of a JKS (and JCEKS) file: Java's magic numbers.
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")
_PEM_MARK = b"-----BEGIN "

#: What keytool does to a JKS store so that klog reads it.
JKS_TO_PKCS12 = ("keytool -importkeystore -srckeystore store.jks -destkeystore store.p12 "
                 "-deststoretype PKCS12")


class KeyStoreError(ValueError):
    """A store that cannot be read (one line, without the store's name: the caller
    names the config key)."""


def store_format(data: bytes) -> str:
    """What a store file is, by its bytes: "PEM", "JKS", or "PKCS12" (a DER sequence, the
    only other format Kafka reads)."""
    if _PEM_MARK in data[:65536]:
        return "PEM"
    if data[:4] in _JKS_MAGIC:
        return "JKS"
    return "PKCS12"


def pkcs12_key_and_chain(data: bytes, password: str | None) -> tuple[str, str]:
    """A PKCS12 key store as (PEM text of its private key, encrypted, followed by its
    certificate and chain; the passphrase of that key)."""
    serialization, pkcs12 = _cryptography()
    try:
        key, certificate, chain = pkcs12.load_key_and_certificates(
            data, None if password is None else password.encode())
    except (ValueError, TypeError) as exc:
        raise KeyStoreError(f"cannot read it as PKCS12 (wrong password, or not a PKCS12 "
                            f"store): {exc}") from None
    if key is None or certificate is None:
        raise KeyStoreError("the PKCS12 store holds no private key with its certificate")
    passphrase = secrets.token_urlsafe(24)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(passphrase.encode()))
    pem += b"".join(c.public_bytes(serialization.Encoding.PEM) for c in (certificate, *chain))
    return pem.decode("ascii"), passphrase


def pkcs12_certificates(data: bytes, password: str | None) -> str:
    """The certificates of a PKCS12 trust store, as PEM text (``cadata``)."""
    serialization, pkcs12 = _cryptography()
    try:
        store = pkcs12.load_pkcs12(data, None if password is None else password.encode())
    except (ValueError, TypeError) as exc:
        raise KeyStoreError(f"cannot read it as PKCS12 (wrong password, or not a PKCS12 "
                            f"store): {exc}") from None
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.insert(0, store.cert.certificate)
    if not certificates:
        raise KeyStoreError("the PKCS12 store holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii")
                   for c in certificates)


def _cryptography() -> tuple[Any, Any]:
    # Imported on first use: only PKCS12 stores need it, and it is a large import.
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:  # a dependency of klog; missing only in a broken install
        raise KeyStoreError("reading PKCS12 needs the 'cryptography' package "
                            "(pip install cryptography), or a PEM store") from None
    return serialization, pkcs12
