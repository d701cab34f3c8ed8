"""SCRAM (klog/protocol/scram.py): RFC 7677's example exchange, Kafka's stored form, and
failures that do not tell an unknown user from a wrong password."""

from __future__ import annotations

import base64

import pytest

from klog.protocol import scram


def test_rfc7677_example_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    # RFC 7677 section 3: user "user", password "pencil".
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    nonces = iter(["rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"])
    monkeypatch.setattr(scram, "_nonce", lambda: next(nonces))
    credential = scram.credential_from_password("SCRAM-SHA-256", "pencil", 4096, salt)
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil")
    server = scram.ScramServer("SCRAM-SHA-256", lambda u: credential if u == "user" else None)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.evaluate(client.first())
    assert server_first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = client.final(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.evaluate(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify(server_final)
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", list(scram.MECHANISMS))
def test_exchange_and_wrong_password(mechanism: str) -> None:
    credential = scram.credential_from_password(mechanism, "secret", 4096)
    users = {"al,i=ce": credential}
    client = scram.ScramClient(mechanism, "al,i=ce", "secret")
    server = scram.ScramServer(mechanism, users.get)
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.username == "al,i=ce"  # saslname escapes (=2C, =3D) decoded

    for user, password in (("al,i=ce", "wrong"), ("nobody", "secret")):
        client = scram.ScramClient(mechanism, user, password)
        server = scram.ScramServer(mechanism, users.get)
        first = server.evaluate(client.first())  # an unknown user still gets a salt
        with pytest.raises(scram.ScramError, match="invalid credentials"):
            server.evaluate(client.final(first))
        assert not server.complete


def test_kafka_stored_form_round_trips_and_holds_no_password() -> None:
    credential = scram.credential_from_password("SCRAM-SHA-512", "secret", 8192)
    text = credential.to_config()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(
        ",iterations=8192")
    assert "secret" not in text
    assert scram.ScramCredential.from_config(text) == credential
    with pytest.raises(ValueError):
        scram.ScramCredential.from_config("salt=AAAA,iterations=4096")


@pytest.mark.parametrize("message", [
    b"p=tls-unique,,n=user,r=abc",  # channel binding
    b"n,,r=abc",  # no user
    b"n,a=other,n=user,r=abc",  # authorization id other than the user
    b"n,,n=user,r=abc,tokenauth=true",  # delegation tokens
    b"\xff\xfe",
])
def test_malformed_client_first_messages_fail(message: bytes) -> None:
    server = scram.ScramServer("SCRAM-SHA-256", lambda u: None)
    with pytest.raises(scram.ScramError):
        server.evaluate(message)
