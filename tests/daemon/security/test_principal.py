"""KafkaPrincipal: Kafka's Type:name form, equality by type and name."""

from __future__ import annotations

import pytest

from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal


def test_parse_and_print_round_trip() -> None:
    alice = KafkaPrincipal.parse("User:alice")
    assert alice == KafkaPrincipal("User", "alice")
    assert str(alice) == "User:alice"
    # Only the first colon separates: a name may hold colons (a TLS DN rarely does, but may).
    assert KafkaPrincipal.parse("User:CN=a:b").name == "CN=a:b"
    assert str(ANONYMOUS) == "User:ANONYMOUS"


@pytest.mark.parametrize("text", ["alice", ":alice", "User:", ""])
def test_a_principal_needs_a_type_and_a_name(text: str) -> None:
    with pytest.raises(ValueError, match="Type:name"):
        KafkaPrincipal.parse(text)
