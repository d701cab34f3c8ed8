"""The principal of a TLS client certificate: its distinguished name, mapped by rules.

Owns Kafka's SSL principal for SSL listeners (DefaultKafkaPrincipalBuilder): a client
that presented a verified certificate is ``User:<name>``, where ``<name>`` is the subject's
distinguished name as Java's ``X500Principal.getName()`` writes it (RFC 2253: the last RDN
first, ``CN=client,OU=eng,O=acme,C=US``) passed through ``ssl.principal.mapping.rules``
(Kafka's SslPrincipalMapper); without a certificate the connection stays ANONYMOUS.

Rules, comma-separated, tried in order, the first that yields a name wins:
``DEFAULT`` (the DN unchanged) or ``RULE:pattern/replacement/[LU]`` (the whole DN must
match ``pattern``; the replacement's ``$1`` are groups; L/U lower or upper the result).
A DN no rule maps is refused, as Kafka refuses it (the connection is closed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: Python's attribute names in ``getpeercert()`` -> Java's RFC 2253 keywords.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
#: Attributes Java writes as OID=#hex (DER of the value): the ones certificates often carry.
_OIDS = {
    "emailAddress": ("1.2.840.113549.1.9.1", 0x16),  # IA5String
    "serialNumber": ("2.5.4.5", 0x13),  # PrintableString
}


def distinguished_name(peercert: dict[str, Any]) -> str:
    """The subject of ``ssl.SSLSocket.getpeercert()`` as Java's RFC 2253 string."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        parts = []
        for name, value in rdn:
            keyword = _KEYWORDS.get(name)
            if keyword is not None:
                parts.append(f"{keyword}={_escape(value)}")
            elif name in _OIDS:
                oid, tag = _OIDS[name]
                raw = value.encode()
                parts.append(f"{oid}=#{tag:02x}{_der_length(len(raw))}{raw.hex()}")
            else:
                parts.append(f"{name}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def _der_length(n: int) -> str:
    if n < 0x80:
        return f"{n:02x}"
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return f"{0x80 | len(body):02x}{body.hex()}"


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and (
                i == 0 or i == len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


class NoMatchingRuleError(ValueError):
    """No ssl.principal.mapping.rules rule maps a certificate's DN."""


@dataclass(frozen=True, slots=True)
class _Rule:
    default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            result = result.lower()
        elif self.case == "U":
            result = result.upper()
        return result


# Kafka's SslPrincipalMapper.RULE_SPLITTER: a pattern and a replacement may hold escaped
# characters ("\/", "\,") but no bare slash.
_RULE_RE = re.compile(
    r"\s*((DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?))\s*(,\s*|$)")


class SslPrincipalMapper:
    """ssl.principal.mapping.rules, parsed once (ValueError for a malformed rule)."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.text = rules
        self.rules = self._parse(rules.strip() or "DEFAULT")

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        rules: list[_Rule] = []
        position = 0
        while position < len(text):
            match = _RULE_RE.match(text, position)
            if match is None or match.end() == position:
                raise ValueError(f"invalid rule: {text[position:]!r}")
            position = match.end()
            if match[6]:
                raise ValueError(f"invalid rule: {match[6]!r} (DEFAULT or "
                                 "RULE:pattern/replacement/[LU])")
            if match[2]:
                rules.append(_Rule(True))
            elif match[1]:
                try:
                    pattern = re.compile(match[3])
                except re.error as exc:
                    raise ValueError(f"invalid rule pattern {match[3]!r}: {exc}") from None
                rules.append(_Rule(False, pattern, _java_replacement(match[4]), match[5]))
        return rules

    def name(self, dn: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRuleError(f"no rule of ssl.principal.mapping.rules ({self.text}) "
                                  f"applies to {dn}")


def _java_replacement(text: str) -> str:
    """Java's replacement syntax ($1, \\$ for a dollar) in Python's (\\g<1>)."""
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
        elif ch == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)
