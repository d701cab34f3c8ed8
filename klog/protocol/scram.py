"""SCRAM (RFC 5802, RFC 7677): credentials, and both sides of the exchange, without I/O.

Owns the SCRAM-SHA-256 and SCRAM-SHA-512 mechanisms as Kafka runs them
(ScramFormatter, ScramSaslServer, ScramSaslClient, ScramCredentialUtils):

- a credential is (salt, StoredKey, ServerKey, iterations), never the password:
  SaltedPassword = PBKDF2-HMAC(password, salt, iterations); ClientKey = HMAC(SaltedPassword,
  "Client Key"); StoredKey = H(ClientKey); ServerKey = HMAC(SaltedPassword, "Server Key").
  Kafka stores it in /config/users/<name> as
  ``SCRAM-SHA-256=salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096``
  (``ScramCredential.to_config`` / ``from_config``);
- the messages (RFC 5802 section 7): client-first ``n,,n=<user>,r=<cnonce>``,
  server-first ``r=<cnonce+snonce>,s=<salt>,i=<iterations>``, client-final
  ``c=biws,r=<nonce>,p=<proof>``, server-final ``v=<signature>`` (or ``e=<error>``);
- ``ScramServer`` checks a client's proof against a stored credential; ``ScramClient``
  (klog's own client) proves a password and checks the server's signature.

Kafka's own rules kept: 4096 to 16384 iterations (``MIN_ITERATIONS``/``MAX_ITERATIONS``);
no channel binding (gs2 flag ``n`` or ``y``, never ``p``); an authorization id, if any,
must equal the user name; the ``tokenauth`` extension (delegation tokens) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

#: mechanism -> (hash name, Kafka's ScramMechanism type id as AlterUserScramCredentials
#: and DescribeUserScramCredentials carry it).
MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}
MECHANISM_BY_TYPE = {type_id: name for name, (_h, type_id) in MECHANISMS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(ValueError):
    """An exchange that cannot go on: a malformed message or a failed proof."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_config(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_config(cls, text: str) -> ScramCredential:
        """Parse ``to_config``'s form (ValueError if a field is missing or malformed)."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism][0]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(Normalize(password), salt, i). SASLprep is not applied, as Kafka's
    ScramFormatter does not apply it either (it uses the password's UTF-8 bytes)."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes,
                           iterations: int) -> ScramCredential:
    digest = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", digest)
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_password(mechanism: str, password: str,
                             iterations: int = DEFAULT_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt,
                                                             iterations), salt, iterations)


def _nonce() -> str:
    # Printable ASCII without ',' (RFC 5802): base64 url-safe letters.
    return secrets.token_urlsafe(24)


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"invalid SCRAM attribute {part!r}")
        out.append((part[0], part[2:]))
    return out


def _decode_name(name: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='; any other '=' is invalid."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError(f"invalid user name encoding in {name!r}")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError(f"invalid base64 {what}") from None


class ScramServer:
    """The server side of one exchange: ``evaluate`` each client message in turn; after
    the second, ``complete`` and ``username``. Any ScramError ends the exchange (failed).

    ``credential_of(username)`` gives the stored credential, or None for an unknown user
    (which fails the same way as a wrong password, at the client's proof, so the answer
    does not tell whether the user exists)."""

    def __init__(self, mechanism: str,
                 credential_of: Callable[[str], ScramCredential | None]) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self._credential_of = credential_of
        self.username: str | None = None
        self.complete = False
        self._state = 0
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2_header = ""
        self._credential: ScramCredential | None = None

    def evaluate(self, message: bytes) -> bytes:
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._state == 0:
            return self._client_first(text).encode()
        if self._state == 1:
            return self._client_final(text).encode()
        raise ScramError("unexpected SCRAM message after the exchange completed")

    def _client_first(self, text: str) -> str:
        flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y") or not _:
            raise ScramError("channel binding is not supported; expected a gs2 header "
                             "'n,,' or 'y,,'")
        if authzid and not authzid.startswith("a="):
            raise ScramError("invalid authorization id in the gs2 header")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise ScramError("invalid SCRAM client-first message")
        username = _decode_name(attrs[0][1])
        if authzid and _decode_name(authzid[2:]) != username:
            raise ScramError("authorization id must be the same as the user name")
        for key, _value in attrs[2:]:
            if key == "m":
                raise ScramError("mandatory SCRAM extensions are not supported")
        extensions = [p for p in bare.split(",")[2:] if p.startswith("tokenauth=")]
        if extensions:
            raise ScramError("delegation token authentication is not supported")
        client_nonce = attrs[1][1]
        if not client_nonce:
            raise ScramError("empty client nonce")
        self.username = username
        credential = self._credential_of(username)
        # An unknown user gets a made-up, stable salt, so the exchange goes on to the
        # proof and fails there as a wrong password does (nothing tells them apart).
        self._credential = credential
        salt = credential.salt if credential is not None else hashlib.sha256(
            b"klog-unknown-user:" + username.encode()).digest()
        iterations = credential.iterations if credential is not None else DEFAULT_ITERATIONS
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = client_nonce + _nonce()
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        self._state = 1
        return self._server_first

    def _client_final(self, text: str) -> str:
        self._state = 2
        proof_at = text.rfind(",p=")
        if proof_at < 0:
            raise ScramError("SCRAM client-final message without a proof")
        without_proof = text[:proof_at]
        attrs = dict(_attributes(without_proof))
        if attrs.get("c") != _b64(self._gs2_header.encode()):
            raise ScramError("invalid channel binding in the client-final message")
        if attrs.get("r") != self._nonce:
            raise ScramError("invalid nonce in the client-final message")
        proof = _unb64(text[proof_at + 3:], "client proof")
        credential = self._credential
        if credential is None:
            raise ScramError("invalid credentials")
        digest = _hash(self.mechanism)
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}"
        signature = hmac.digest(credential.stored_key, auth_message.encode(), digest)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(digest, client_key).digest(),
                                   credential.stored_key):
            raise ScramError("invalid credentials")
        self.complete = True
        server_signature = hmac.digest(credential.server_key, auth_message.encode(), digest)
        return f"v={_b64(server_signature)}"


class ScramClient:
    """The client side: ``first()``, then ``final(server_first)``, then
    ``verify(server_final)`` (ScramError if the server cannot prove it knows the key)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        _hash(mechanism)
        self.mechanism = mechanism
        self.username = username
        self.password = password
        self._nonce = _nonce()
        self._first_bare = f"n={encode_name(username)},r={self._nonce}"
        self._auth_message = ""
        self._salted = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(_attributes(text))
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i")
        if not nonce.startswith(self._nonce) or salt is None or iterations is None:
            raise ScramError("invalid SCRAM server-first message")
        rounds = int(iterations)
        if not MIN_ITERATIONS <= rounds <= MAX_ITERATIONS * 64:
            raise ScramError(f"refusing {rounds} iterations")
        digest = _hash(self.mechanism)
        self._salted = salted_password(self.mechanism, self.password,
                                       _unb64(salt, "salt"), rounds)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}"
        client_key = hmac.digest(self._salted, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        signature = hmac.digest(stored_key, self._auth_message.encode(), digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(_attributes(server_final.decode()))
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        digest = _hash(self.mechanism)
        server_key = hmac.digest(self._salted, b"Server Key", digest)
        expected = hmac.digest(server_key, self._auth_message.encode(), digest)
        if not hmac.compare_digest(_unb64(attrs.get("v", ""), "server signature"), expected):
            raise ScramError("the server's signature does not match: it does not hold "
                             "this user's credential")
