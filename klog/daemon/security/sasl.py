"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: Kafka's SaslServerAuthenticator.

Owns one connection's authentication state machine, without I/O (the connection feeds it
what the client sent and writes what it answers):

1. ApiVersions (any number), then SaslHandshake naming a mechanism of
   ``sasl.enabled.mechanisms``; one not enabled is answered UNSUPPORTED_SASL_MECHANISM with
   the enabled list, and fails the connection.
2. The mechanism's tokens: in SaslAuthenticate requests after a v1 handshake, or -- after a
   v0 handshake, as Kafka still allows -- as raw frames (a size and the token, answered the
   same way, no Kafka header).
3. Success sets the connection's principal (``User:<name>``); failure answers
   SASL_AUTHENTICATION_FAILED (raw tokens: nothing) and fails the connection, which the
   connection closes after connection.failed.authentication.delay.ms.

Until authenticated, any other request fails the connection (``allows``), and frames are
limited to sasl.server.max.receive.size (the connection applies ``max_receive_size``).
With connections.max.reauth.ms > 0 a session lasts that long (``session_lifetime_ms`` in
SaslAuthenticate v1+ answers); a client re-authenticates on the same connection with
SaslHandshake + SaslAuthenticate (KIP-368: same mechanism, same principal), and a request
that arrives after the session expired closes the connection (``session_expired``).

Mechanisms: PLAIN (RFC 4616; the users are the listener's PlainLoginModule
``user_<name>`` JAAS options), SCRAM-SHA-256/512 (klog/protocol/scram.py; credentials
from ``ScramCredentialCache``) and OAUTHBEARER with unsecured JWS tokens (Kafka's default
validator: ``sub`` is the principal, ``exp`` bounds the session).
"""

from __future__ import annotations

import base64
import enum
import hmac
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from klog.daemon.security.principal import USER_TYPE, KafkaPrincipal
from klog.protocol import scram
from klog.protocol.errors import ErrorCode

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
API_VERSIONS = 18
#: What an unauthenticated SASL connection may send (anything else closes it).
PRE_AUTHENTICATION_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
#: The mechanisms klog implements.
SUPPORTED_MECHANISMS = (PLAIN, *scram.MECHANISMS, OAUTHBEARER)


class SaslConfigError(ValueError):
    """A SASL listener setting klog cannot honour (one line naming the key)."""


@dataclass(frozen=True, slots=True)
class SaslServerConfig:
    """What one SASL listener authenticates with (built by security/listener.py)."""

    mechanisms: tuple[str, ...]
    #: PLAIN: user -> password (PlainLoginModule's user_<name> options).
    plain_users: Mapping[str, str] = field(default_factory=dict)
    #: SCRAM: (user, mechanism) -> credential or None.
    scram_credential: Callable[[str, str], scram.ScramCredential | None] = \
        lambda _user, _mechanism: None
    reauth_ms: int = 0
    max_receive_size: int = 524288


class _State(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # tokens of the chosen mechanism
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int = 0


class _PlainServer:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd`` in one message."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, message: bytes) -> bytes:
        parts = message.split(b"\x00")
        if len(parts) != 3:
            raise scram.ScramError("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise scram.ScramError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise scram.ScramError("Authentication failed: username not specified")
        if not password:
            raise scram.ScramError("Authentication failed: password not specified")
        expected = self.users.get(username)
        # compare_digest either way, so an unknown user costs what a known one does.
        if not hmac.compare_digest((expected or "\x00").encode(), password.encode()) \
                or expected is None:
            raise scram.ScramError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise scram.ScramError("Authentication failed: Client requested an "
                                   "authorization id that is different from username")
        self.username = username
        self.complete = True
        return b""


class _OAuthBearerServer:
    """OAUTHBEARER (RFC 7628) with Kafka's default server validator for unsecured JWS
    tokens (OAuthBearerUnsecuredValidatorCallbackHandler): the token's header says
    ``"alg":"none"``, its ``sub`` claim is the principal, ``exp`` (seconds) must lie in
    the future. Signed tokens need a validator klog does not have (a JWKS endpoint)."""

    _RESPONSE = re.compile(r"n,(a=(?P<authzid>[^,]*))?,\x01(?P<pairs>(?:[^\x01]*\x01)*)\x01")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.username: str | None = None
        self.complete = False
        self.expires_at: float | None = None  # wall-clock seconds
        self._error_sent = False

    def evaluate(self, message: bytes) -> bytes:
        if self._error_sent:  # the client's \x01 after an error: the exchange ends
            raise scram.ScramError("Authentication failed: invalid OAuth bearer token")
        try:
            match = self._RESPONSE.fullmatch(message.decode())
        except UnicodeDecodeError:
            match = None
        if match is None:
            raise scram.ScramError("Invalid OAUTHBEARER client first message")
        pairs = dict(p.split("=", 1) for p in match["pairs"].split("\x01") if "=" in p)
        auth = pairs.get("auth", "")
        if not auth.startswith("Bearer "):
            raise scram.ScramError("Invalid OAUTHBEARER client first message: no token")
        try:
            subject, expires = _unsecured_jws(auth[7:].strip(), time.time())
        except ValueError:
            # RFC 7628 section 3.2.2: an error document, to which the client answers \x01
            self._error_sent = True
            return json.dumps({"status": "invalid_token"}).encode()
        authzid = match["authzid"]
        if authzid and authzid != subject:
            raise scram.ScramError("Authentication failed: the authorization id is not the "
                                   "token's principal")
        self.username = subject
        self.expires_at = expires
        self.complete = True
        return b""


def _unsecured_jws(token: str, now: float) -> tuple[str, float]:
    """(sub, exp) of an unsecured JWS compact serialization; ValueError if invalid."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        raise ValueError("not an unsecured JWS")

    def part(text: str) -> dict[str, object]:
        decoded = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if not isinstance(decoded, dict):
            raise ValueError("not a JSON object")
        return decoded

    try:
        header, claims = part(parts[0]), part(parts[1])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"undecodable token: {exc}") from None
    if header.get("alg") != "none":
        raise ValueError("only unsecured (alg none) tokens are validated")
    subject, expires = claims.get("sub"), claims.get("exp")
    if not isinstance(subject, str) or not subject:
        raise ValueError("no sub claim")
    if not isinstance(expires, (int, float)) or expires <= now:
        raise ValueError("expired or without exp")
    return subject, float(expires)


class SaslAuthenticator:
    """One connection's SASL state (module docstring). ``on_authenticated(principal)`` is
    called on each success, ``on_failed()`` once on failure."""

    def __init__(self, config: SaslServerConfig,
                 on_authenticated: Callable[[KafkaPrincipal], None],
                 on_failed: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._on_authenticated = on_authenticated
        self._on_failed = on_failed
        self._clock = clock
        self._state = _State.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None
        self.raw_tokens = False  # v0 handshake: tokens come as bare frames
        self._server: _PlainServer | scram.ScramServer | _OAuthBearerServer | None = None
        self._reauthenticating = False
        self._authenticate_version = -1
        self.session_expires: float | None = None
        self.session_lifetime_ms = 0

    @property
    def authenticated(self) -> bool:
        """Whether requests other than the SASL ones may be served."""
        return self.principal is not None and self._state is not _State.FAILED

    @property
    def complete(self) -> bool:
        """The last exchange (authentication or re-authentication) succeeded."""
        return self._state is _State.COMPLETE

    @property
    def failed(self) -> bool:
        return self._state is _State.FAILED

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be served now."""
        return self.authenticated or (api_key in PRE_AUTHENTICATION_APIS
                                      and self._state is not _State.FAILED)

    def session_expired(self) -> bool:
        return self.session_expires is not None and self._clock() >= self.session_expires

    # -- SaslHandshake -----------------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> tuple[int, list[str]]:
        """(error code, enabled mechanisms) for a SaslHandshake request."""
        enabled = list(self.config.mechanisms)
        if self._state is _State.COMPLETE:
            # KIP-368 re-authentication: only for clients that can learn a session
            # lifetime (SaslAuthenticate v1+), and with the same mechanism.
            if self._authenticate_version < 1 or version < 1:
                return ErrorCode.ILLEGAL_SASL_STATE, enabled
            if mechanism != self.mechanism:
                self._fail()
                return ErrorCode.ILLEGAL_SASL_STATE, enabled
            self._reauthenticating = True
            self._state = _State.AUTHENTICATE
            self._server = self._new_server(mechanism)
            return ErrorCode.NONE, enabled
        if self._state is not _State.HANDSHAKE:
            self._fail()
            return ErrorCode.ILLEGAL_SASL_STATE, enabled
        if mechanism not in enabled:
            self._fail()
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self._state = _State.AUTHENTICATE
        self.raw_tokens = version == 0
        return ErrorCode.NONE, enabled

    def _new_server(self, mechanism: str
                    ) -> _PlainServer | scram.ScramServer | _OAuthBearerServer:
        if mechanism == PLAIN:
            return _PlainServer(self.config.plain_users)
        if mechanism == OAUTHBEARER:
            return _OAuthBearerServer(self._clock)
        lookup = self.config.scram_credential
        return scram.ScramServer(mechanism, lambda user: lookup(user, mechanism))

    # -- tokens ----------------------------------------------------------------------------

    def authenticate(self, token: bytes, version: int) -> AuthenticateResult:
        """A SaslAuthenticate request's answer."""
        if self._state is not _State.AUTHENTICATE or self.raw_tokens:
            self._fail()
            return AuthenticateResult(ErrorCode.ILLEGAL_SASL_STATE,
                                      "Unexpected SaslAuthenticate request", b"")
        self._authenticate_version = version
        try:
            response = self._evaluate(token)
        except scram.ScramError as exc:
            self._fail()
            return AuthenticateResult(ErrorCode.SASL_AUTHENTICATION_FAILED,
                                      _failure_message(self.mechanism, exc), b"")
        lifetime = 0
        if self.complete and self.config.reauth_ms > 0 and version >= 1:
            lifetime = self.session_lifetime_ms
        return AuthenticateResult(ErrorCode.NONE, None, response, lifetime)

    def raw_token(self, token: bytes) -> bytes | None:
        """A raw token's answer (v0 handshake), None when authentication failed."""
        if self._state is not _State.AUTHENTICATE or not self.raw_tokens:
            self._fail()
            return None
        try:
            return self._evaluate(token)
        except scram.ScramError:
            self._fail()
            return None

    def _evaluate(self, token: bytes) -> bytes:
        server = self._server
        assert server is not None
        response = server.evaluate(token)
        if server.complete:
            assert server.username is not None
            principal = KafkaPrincipal(USER_TYPE, server.username)
            if self._reauthenticating and principal != self.principal:
                raise scram.ScramError(f"Cannot change principals during re-authentication "
                                       f"from {self.principal}: {principal}")
            self.principal = principal
            self._state = _State.COMPLETE
            self._reauthenticating = False
            self.raw_tokens = False
            self._server = None
            if self.config.reauth_ms > 0:
                lifetime = self.config.reauth_ms / 1000
                if isinstance(server, _OAuthBearerServer) and server.expires_at is not None:
                    # a token's session ends with the token (Kafka's KIP-368 rule)
                    lifetime = min(lifetime, max(server.expires_at - time.time(), 0.0))
                self.session_expires = self._clock() + lifetime
                self.session_lifetime_ms = int(lifetime * 1000)
            self._on_authenticated(principal)
        return response

    def _fail(self) -> None:
        if self._state is not _State.FAILED:
            self._state = _State.FAILED
            self._on_failed()


def _failure_message(mechanism: str | None, exc: Exception) -> str:
    text = str(exc)
    if mechanism not in scram.MECHANISMS or text.startswith("Authentication failed"):
        return text
    # Kafka's ScramSaslServer words every SCRAM failure the same way.
    return (f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


def check_mechanisms(mechanisms: Sequence[str], key: str) -> tuple[str, ...]:
    """The enabled mechanisms of a SASL listener, or SaslConfigError naming ``key``."""
    names = tuple(m.strip().upper() for m in mechanisms if m.strip())
    if not names:
        raise SaslConfigError(f"{key} is empty: a SASL listener needs at least one of "
                              f"{', '.join(SUPPORTED_MECHANISMS)}")
    unsupported = [m for m in names if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        raise SaslConfigError(f"{key}: klog does not support SASL mechanism "
                              f"{', '.join(unsupported)} (supported: "
                              f"{', '.join(SUPPORTED_MECHANISMS)})")
    return names
