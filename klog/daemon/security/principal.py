"""KafkaPrincipal: who sent a request, as authentication established it.

A connection starts as ``User:ANONYMOUS`` (Kafka's principal for PLAINTEXT and for SSL
without a client certificate); SASL and TLS client authentication replace it with the
authenticated user. Authorization (ACLs, super.users) compares principals by type and name,
as Kafka's ``KafkaPrincipal`` equality does.
"""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); ValueError without a type."""
        principal_type, sep, name = text.partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"expected a principal as Type:name (e.g. User:alice), "
                             f"not {text!r}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
