"""JAAS login configuration, as Kafka reads ``sasl.jaas.config``.

Owns parsing the one-line JAAS form Kafka accepts in ``sasl.jaas.config`` and
``listener.name.<listener>.<mechanism>.sasl.jaas.config``::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

(Kafka's JaasConfig: one login module, a control flag, ``name=value`` options where the
value is a quoted string or a bare token, and a closing ``;``.) What the options mean is
the mechanism's business: PlainLoginModule's ``user_<name>="<password>"`` entries are the
users a PLAIN listener accepts; ``username``/``password`` are the broker's own credentials
as a client of other brokers (ScramLoginModule too). Pure text: read by the broker's
listeners (klog/daemon/security/listener.py) and klog's client settings
(klog/client/security.py) alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN_RE = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|([^\s=;"]+)|(=)|(;))')


class JaasConfigError(ValueError):
    """A sasl.jaas.config value that does not parse."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>`` options: user -> password."""
        return {key[5:]: value for key, value in self.options.items()
                if key.startswith("user_")}


def parse_jaas_config(text: str, config_name: str = "sasl.jaas.config") -> JaasEntry:
    """The single login module of a JAAS config line (JaasConfigError otherwise)."""
    tokens = _tokens(text, config_name)
    entries: list[JaasEntry] = []
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        if kind != "word":
            raise JaasConfigError(f"{config_name}: expected a login module class name, "
                                  f"found {value!r}")
        module = value
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" \
                or tokens[i + 1][1].lower() not in _FLAGS:
            raise JaasConfigError(f"{config_name}: login module {module} needs a control "
                                  f"flag ({', '.join(_FLAGS)})")
        flag = tokens[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if (i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "="
                    or tokens[i + 2][0] not in ("word", "string")):
                raise JaasConfigError(f"{config_name}: expected name=value options after "
                                      f"{module} {flag}")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasConfigError(f"{config_name}: the login module entry must end with ';'")
        i += 1
        entries.append(JaasEntry(module, flag, options))
    if len(entries) != 1:
        raise JaasConfigError(f"{config_name} must contain exactly one login module, "
                              f"found {len(entries)}")
    return entries[0]


def _tokens(text: str, config_name: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    position = 0
    stripped = text.rstrip()
    while position < len(stripped):
        match = _TOKEN_RE.match(stripped, position)
        if match is None or match.end() == position:
            raise JaasConfigError(f"{config_name}: cannot parse near "
                                  f"{stripped[position:position + 20]!r}")
        position = match.end()
        if match[1] is not None:
            out.append(("string", re.sub(r"\\(.)", r"\1", match[1])))
        elif match[2] is not None:
            out.append(("word", match[2]))
        elif match[3] is not None:
            out.append(("=", "="))
        else:
            out.append((";", ";"))
    return out
