"""The SASL state machine (klog/daemon/security/sasl.py) without sockets."""

from __future__ import annotations

import pytest

from klog.daemon.security.principal import KafkaPrincipal
from klog.daemon.security.sasl import (
    SaslAuthenticator,
    SaslConfigError,
    SaslServerConfig,
    check_mechanisms,
)
from klog.protocol import scram
from klog.protocol.errors import ErrorCode

CREDENTIAL = scram.credential_from_password("SCRAM-SHA-256", "bob-secret")


class Recorder:
    def __init__(self) -> None:
        self.principals: list[KafkaPrincipal] = []
        self.failures = 0
        self.now = 0.0

    def authenticator(self, **config: object) -> SaslAuthenticator:
        settings: dict[str, object] = {
            "mechanisms": ("PLAIN", "SCRAM-SHA-256"),
            "plain_users": {"alice": "alice-secret"},
            "scram_credential": lambda u, m: CREDENTIAL if (u, m) == (
                "bob", "SCRAM-SHA-256") else None,
        }
        settings.update(config)
        return SaslAuthenticator(SaslServerConfig(**settings),  # type: ignore[arg-type]
                                 self.principals.append, self._failed, lambda: self.now)

    def _failed(self) -> None:
        self.failures += 1


def test_plain_then_only_then_everything_is_allowed() -> None:
    rec = Recorder()
    auth = rec.authenticator()
    assert auth.allows(18) and auth.allows(17) and not auth.allows(3)
    assert auth.handshake("PLAIN", 1) == (ErrorCode.NONE, ["PLAIN", "SCRAM-SHA-256"])
    result = auth.authenticate(b"\x00alice\x00alice-secret", 2)
    assert result.error_code == 0 and result.session_lifetime_ms == 0
    assert rec.principals == [KafkaPrincipal("User", "alice")]
    assert auth.authenticated and auth.allows(3)


@pytest.mark.parametrize("token, message", [
    (b"\x00alice\x00wrong", "Invalid username or password"),
    (b"\x00nobody\x00alice-secret", "Invalid username or password"),
    (b"bob\x00alice\x00alice-secret", "authorization id"),
    (b"alice-secret", "expected 3 tokens"),
])
def test_plain_failures(token: bytes, message: str) -> None:
    rec = Recorder()
    auth = rec.authenticator()
    auth.handshake("PLAIN", 1)
    result = auth.authenticate(token, 1)
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert message in (result.error_message or "")
    assert rec.failures == 1 and not auth.authenticated and not auth.allows(18)


def test_unsupported_mechanism_and_out_of_order_requests_fail() -> None:
    rec = Recorder()
    auth = rec.authenticator()
    assert auth.handshake("GSSAPI", 1) == (ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                           ["PLAIN", "SCRAM-SHA-256"])
    assert rec.failures == 1
    rec = Recorder()
    auth = rec.authenticator()
    assert auth.authenticate(b"x", 1).error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert rec.failures == 1


def test_v0_handshake_takes_raw_tokens() -> None:
    rec = Recorder()
    auth = rec.authenticator()
    auth.handshake("SCRAM-SHA-256", 0)
    assert auth.raw_tokens
    client = scram.ScramClient("SCRAM-SHA-256", "bob", "bob-secret")
    first = auth.raw_token(client.first())
    assert first is not None
    final = auth.raw_token(client.final(first))
    assert final is not None
    client.verify(final)
    assert rec.principals == [KafkaPrincipal("User", "bob")] and not auth.raw_tokens
    # a SaslAuthenticate request is not what a v0 handshake leads to
    rec = Recorder()
    auth = rec.authenticator()
    auth.handshake("PLAIN", 0)
    assert auth.authenticate(b"\x00alice\x00alice-secret", 0).error_code \
        == ErrorCode.ILLEGAL_SASL_STATE


def test_session_lifetime_expiry_and_reauthentication() -> None:
    rec = Recorder()
    auth = rec.authenticator(reauth_ms=1000)
    auth.handshake("PLAIN", 1)
    assert auth.authenticate(b"\x00alice\x00alice-secret", 1).session_lifetime_ms == 1000
    assert not auth.session_expired()
    rec.now = 1.5
    assert auth.session_expired()
    # re-authentication: same mechanism, same principal -> a new session
    assert auth.handshake("PLAIN", 1)[0] == 0
    assert auth.authenticate(b"\x00alice\x00alice-secret", 1).error_code == 0
    assert not auth.session_expired() and len(rec.principals) == 2
    # ... as someone else: refused, and the connection fails
    auth.handshake("PLAIN", 1)
    other = rec.authenticator(reauth_ms=1000, plain_users={"alice": "a", "eve": "e"})
    other.handshake("PLAIN", 1)
    other.authenticate(b"\x00alice\x00a", 1)
    other.handshake("PLAIN", 1)
    result = other.authenticate(b"\x00eve\x00e", 1)
    assert result.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals" in (result.error_message or "")


def test_no_reauthentication_for_v0_authenticate_clients() -> None:
    rec = Recorder()
    auth = rec.authenticator(reauth_ms=1000)
    auth.handshake("PLAIN", 1)
    assert auth.authenticate(b"\x00alice\x00alice-secret", 0).session_lifetime_ms == 0
    assert auth.handshake("PLAIN", 1)[0] == ErrorCode.ILLEGAL_SASL_STATE
    assert rec.failures == 0 and auth.authenticated


def test_enabled_mechanisms_must_be_supported() -> None:
    assert check_mechanisms(["plain", " SCRAM-SHA-512"], "k") == ("PLAIN", "SCRAM-SHA-512")
    with pytest.raises(SaslConfigError, match="GSSAPI"):
        check_mechanisms(["GSSAPI", "PLAIN"], "sasl.enabled.mechanisms")
    with pytest.raises(SaslConfigError, match="empty"):
        check_mechanisms([], "sasl.enabled.mechanisms")


def _jws(claims: dict[str, object], alg: str = "none") -> str:
    import base64
    import json

    def b64(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{b64({'alg': alg})}.{b64(claims)}."


def _bearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_unsecured_tokens() -> None:
    import time as wall

    rec = Recorder()
    auth = rec.authenticator(mechanisms=("OAUTHBEARER",), reauth_ms=3_600_000)
    assert auth.handshake("OAUTHBEARER", 1)[0] == 0
    result = auth.authenticate(_bearer(_jws({"sub": "carol", "exp": wall.time() + 60})), 1)
    assert result.error_code == 0 and rec.principals == [KafkaPrincipal("User", "carol")]
    assert 0 < result.session_lifetime_ms <= 60_000  # the token's expiry bounds the session

    for token in (_jws({"sub": "carol", "exp": wall.time() - 1}),  # expired
                  _jws({"sub": "carol", "exp": wall.time() + 60}, alg="HS256"),  # signed
                  _jws({"exp": wall.time() + 60}),  # no principal
                  "not-a-token"):
        rec = Recorder()
        auth = rec.authenticator(mechanisms=("OAUTHBEARER",))
        auth.handshake("OAUTHBEARER", 1)
        first = auth.authenticate(_bearer(token), 1)
        # RFC 7628: an error document first, the client answers \x01, then the failure
        assert first.error_code == 0 and b"invalid_token" in first.auth_bytes
        assert auth.authenticate(b"\x01", 1).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert rec.failures == 1 and not rec.principals
