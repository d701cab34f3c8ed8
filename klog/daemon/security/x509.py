"""What the broker reads of its own certificate: validity dates, subject, subject alt names.

Owns reading the leaf certificate of a key store (``ssl.keystore.location`` or
``ssl.keystore.certificate.chain``; PKCS12 stores reach here as PEM through
klog/protocol/keystores.py) for two checks, through PyCA's ``cryptography`` (Python's
``ssl`` decodes only a peer's certificate, and only a verified one):

- the start-up and reload warning for a key store certificate that has expired or is not
  valid yet (clients refuse it; Kafka starts regardless, without a word);
- Kafka's checks of a dynamically reloaded key store (SslFactory.CertificateEntries): the
  subject's distinguished name unchanged unless ``ssl.allow.dn.changes``, and every old
  subject alternative name still present unless ``ssl.allow.san.changes``.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported where a certificate is parsed: a broker without TLS never needs it, and
    # it is ~30 ms of every broker's start-up.
    from cryptography import x509

#: RFC 2253 keywords of the attribute types certificates carry (others: dotted OID).
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST",
             "2.5.4.9": "STREET", "2.5.4.10": "O", "2.5.4.11": "OU",
             "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}
#: GeneralName tags -> how OpenSSL prints them.
_GENERAL_NAMES = {0x81: "email", 0x82: "DNS", 0x86: "URI", 0x87: "IP"}
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)


class CertificateError(ValueError):
    """Bytes that are not an X.509 certificate this module can read."""


@dataclass(frozen=True)
class Certificate:
    not_before: datetime
    not_after: datetime
    #: (attribute type OID, value) per attribute, in the certificate's order (C first).
    subject: tuple[tuple[str, str], ...]
    #: (GeneralName tag, value as printed) per subject alternative name.
    subject_alt_names: frozenset[tuple[int, str]]

    @property
    def dn(self) -> str:
        """The subject as Java writes it (RFC 2253: the last attribute first)."""
        return ",".join(f"{_KEYWORDS.get(oid, oid)}={value}"
                        for oid, value in reversed(self.subject))

    def same_dn(self, other: Certificate) -> bool:
        """Kafka compares X500Principals: canonical form, case and spacing ignored."""
        def canonical(c: Certificate) -> tuple[tuple[str, str], ...]:
            return tuple((oid, " ".join(value.split()).casefold()) for oid, value in c.subject)
        return canonical(self) == canonical(other)

    def san_text(self) -> str:
        return ", ".join(f"{_GENERAL_NAMES.get(tag, hex(tag))}:{value}"
                         for tag, value in sorted(self.subject_alt_names))

    def validity_problem(self, now: datetime | None = None) -> str | None:
        """Why a peer would refuse this certificate now for its dates, or None."""
        now = now or datetime.now(UTC)
        if now > self.not_after:
            return f"expired on {_when(self.not_after)}"
        if now < self.not_before:
            return f"is not valid until {_when(self.not_before)}"
        return None


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def first_pem_certificate(pem: str) -> Certificate | None:
    """The first certificate of a PEM text (a key store's leaf), None when it has none."""
    match = _PEM_CERT.search(pem)
    if match is None:
        return None
    try:
        der = ssl.PEM_cert_to_DER_cert(match.group(0))
    except ValueError as exc:
        raise CertificateError(f"not a PEM certificate: {exc}") from None
    return parse_certificate(der)


def parse_certificate(der: bytes) -> Certificate:
    from cryptography import x509

    # cryptography decodes lazily: a malformed extension raises when it is read, inside.
    try:
        cert = x509.load_der_x509_certificate(der)
        subject = tuple((attribute.oid.dotted_string, str(attribute.value))
                        for rdn in cert.subject.rdns for attribute in rdn)
        try:
            names = cert.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            sans: frozenset[tuple[int, str]] = frozenset()
        else:
            sans = frozenset(_general_name(name) for name in names)
        return Certificate(cert.not_valid_before_utc, cert.not_valid_after_utc, subject, sans)
    except ValueError as exc:
        raise CertificateError(f"not an X.509 certificate: {exc}") from None


def _general_name(name: x509.GeneralName) -> tuple[int, str]:
    """A subject alternative name as (its GeneralName tag, its value as OpenSSL prints it);
    other kinds (otherName, directoryName...) are compared by their representation."""
    from cryptography import x509

    kinds: dict[int, type[x509.GeneralName]] = {
        0x81: x509.RFC822Name, 0x82: x509.DNSName, 0x86: x509.UniformResourceIdentifier,
        0x87: x509.IPAddress}
    for tag, kind in kinds.items():
        if isinstance(name, kind):
            return tag, str(name.value)
    return 0, repr(name)
