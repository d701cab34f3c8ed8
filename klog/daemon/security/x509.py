"""What the broker reads of its own certificate: validity dates, subject, subject alt names.

Owns decoding the leaf certificate of a PEM key store (``ssl.keystore.location`` or
``ssl.keystore.certificate.chain``) far enough for two checks, with no dependency beyond
the standard library (Python's ``ssl`` decodes only a peer's certificate, and only a
verified one):

- the start-up and reload warning for a key store certificate that has expired or is not
  valid yet (clients refuse it; Kafka starts regardless, without a word);
- Kafka's checks of a dynamically reloaded key store (SslFactory.CertificateEntries): the
  subject's distinguished name unchanged unless ``ssl.allow.dn.changes``, and every old
  subject alternative name still present unless ``ssl.allow.san.changes``.

The grammar read (RFC 5280 section 4.1, DER)::

    Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }
    TBSCertificate ::= SEQUENCE {
        version [0] EXPLICIT OPTIONAL, serialNumber INTEGER, signature AlgorithmIdentifier,
        issuer Name, validity SEQUENCE { notBefore Time, notAfter Time }, subject Name,
        subjectPublicKeyInfo, issuerUniqueID [1] OPTIONAL, subjectUniqueID [2] OPTIONAL,
        extensions [3] EXPLICIT SEQUENCE OF Extension OPTIONAL }
    Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value ANY (a string) }
    Extension ::= SEQUENCE { extnID OID, critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING }
    Time ::= UTCTime (YYMMDDHHMMSSZ) | GeneralizedTime (YYYYMMDDHHMMSSZ)
    subjectAltName (2.5.29.17) ::= SEQUENCE OF GeneralName (context-tagged)
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime

_SEQUENCE, _SET, _OID, _OCTET_STRING = 0x30, 0x31, 0x06, 0x04
_UTC_TIME, _GENERALIZED_TIME = 0x17, 0x18
_SUBJECT_ALT_NAME = "2.5.29.17"
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
    try:
        return _parse(memoryview(der))
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, CertificateError):
            raise
        raise CertificateError(f"not an X.509 certificate: {exc}") from None


def _parse(der: memoryview) -> Certificate:
    tag, cert, _ = _tlv(der, 0)
    _expect(tag, _SEQUENCE, "Certificate")
    tag, tbs, _ = _tlv(cert, 0)
    _expect(tag, _SEQUENCE, "TBSCertificate")
    fields = list(_children(tbs))
    if fields and fields[0][0] == 0xA0:  # version [0]
        fields = fields[1:]
    if len(fields) < 6:
        raise CertificateError("TBSCertificate has too few fields")
    # serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, ...
    validity, subject = fields[3], fields[4]
    _expect(validity[0], _SEQUENCE, "Validity")
    times = list(_children(validity[1]))
    if len(times) != 2:
        raise CertificateError("Validity needs notBefore and notAfter")
    sans: frozenset[tuple[int, str]] = frozenset()
    for tag, body in fields[6:]:
        if tag == 0xA3:  # extensions [3]
            sans = _subject_alt_names(body)
    return Certificate(_time(*times[0]), _time(*times[1]), _name(subject), sans)


def _tlv(data: memoryview, pos: int) -> tuple[int, memoryview, int]:
    """(tag, contents, position after) of the DER element at ``pos``."""
    tag = data[pos]
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4:
            raise CertificateError("unsupported DER length")
        length = int.from_bytes(data[pos:pos + count], "big")
        pos += count
    end = pos + length
    if end > len(data):
        raise CertificateError("DER element runs past its container")
    return tag, data[pos:end], end


def _children(data: memoryview) -> list[tuple[int, memoryview]]:
    out = []
    pos = 0
    while pos < len(data):
        tag, body, pos = _tlv(data, pos)
        out.append((tag, body))
    return out


def _expect(tag: int, wanted: int, what: str) -> None:
    if tag != wanted:
        raise CertificateError(f"{what}: tag {tag:#x}, expected {wanted:#x}")


def _time(tag: int, body: memoryview) -> datetime:
    text = bytes(body).decode("ascii")
    if tag == _UTC_TIME:  # RFC 5280: YY >= 50 is 19YY
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != _GENERALIZED_TIME:
        raise CertificateError(f"Time: tag {tag:#x}")
    return datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=UTC)


def _oid(body: memoryview) -> str:
    values = []
    value = 0
    for byte in bytes(body):
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            values.append(value)
            value = 0
    if not values:
        raise CertificateError("empty OID")
    first = min(values[0] // 40, 2)  # the first value packs two arcs: 40 * X + Y
    return ".".join(map(str, [first, values[0] - 40 * first, *values[1:]]))


def _name(element: tuple[int, memoryview]) -> tuple[tuple[str, str], ...]:
    tag, body = element
    _expect(tag, _SEQUENCE, "Name")
    out = []
    for rdn_tag, rdn in _children(body):
        _expect(rdn_tag, _SET, "RelativeDistinguishedName")
        for attribute_tag, attribute in _children(rdn):
            _expect(attribute_tag, _SEQUENCE, "AttributeTypeAndValue")
            (oid_tag, oid), (value_tag, value) = _children(attribute)[:2]
            _expect(oid_tag, _OID, "AttributeType")
            # BMPString is UTF-16; the other string types are ASCII subsets or UTF-8
            text = (bytes(value).decode("utf-16-be") if value_tag == 0x1E
                    else bytes(value).decode("utf-8", "replace"))
            out.append((_oid(oid), text))
    return tuple(out)


def _subject_alt_names(body: memoryview) -> frozenset[tuple[int, str]]:
    tag, extensions, _ = _tlv(body, 0)
    _expect(tag, _SEQUENCE, "Extensions")
    for ext_tag, extension in _children(extensions):
        _expect(ext_tag, _SEQUENCE, "Extension")
        parts = _children(extension)
        if _oid(parts[0][1]) != _SUBJECT_ALT_NAME:
            continue
        _, value = parts[-1]  # extnValue, after the optional critical flag
        names_tag, names, _ = _tlv(value, 0)
        _expect(names_tag, _SEQUENCE, "GeneralNames")
        out = set()
        for name_tag, name in _children(names):
            raw = bytes(name)
            if name_tag == 0x87:
                text = str(ipaddress.ip_address(raw)) if len(raw) in (4, 16) else raw.hex()
            elif name_tag in _GENERAL_NAMES:
                text = raw.decode("ascii", "replace")
            else:  # otherName, directoryName...: compared by their bytes
                text = raw.hex()
            out.add((name_tag, text))
        return frozenset(out)
    return frozenset()
