"""The key store certificate's dates, subject and alternative names
(klog/daemon/security/x509.py), checked against what the openssl command line prints."""

from __future__ import annotations

import ssl
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from klog.daemon.security.x509 import CertificateError, first_pem_certificate, parse_certificate
from tests.daemon.security.certs import Pki


def openssl_dates(path: Path) -> tuple[datetime, datetime]:
    out = subprocess.run(["openssl", "x509", "-in", str(path), "-noout", "-dates"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    dates = dict(line.split("=", 1) for line in out.splitlines())
    return tuple(datetime.strptime(dates[k], "%b %d %H:%M:%S %Y GMT").replace(tzinfo=UTC)
                 for k in ("notBefore", "notAfter"))  # type: ignore[return-value]


def test_dates_subject_and_alt_names(pki: Pki) -> None:
    for keystore in (pki.server_keystore, pki.expired_server_keystore,
                     pki.future_server_keystore):
        cert = first_pem_certificate(keystore.read_text())  # the key comes first
        assert cert is not None
        assert (cert.not_before, cert.not_after) == openssl_dates(keystore)
        assert cert.dn == "CN=localhost"
        assert cert.san_text() == "DNS:localhost, IP:127.0.0.1"
    client = first_pem_certificate(pki.client_cert.read_text())
    assert client is not None and client.dn == pki.client_dn
    assert client.subject_alt_names == frozenset()


def test_validity_problem(pki: Pki) -> None:
    expired = first_pem_certificate(pki.expired_server_keystore.read_text())
    future = first_pem_certificate(pki.future_server_keystore.read_text())
    valid = first_pem_certificate(pki.server_keystore.read_text())
    assert expired is not None and future is not None and valid is not None
    assert expired.validity_problem() == f"expired on {pki.expired_on:%Y-%m-%d %H:%M:%S} UTC"
    assert future.validity_problem() == \
        f"is not valid until {pki.valid_from:%Y-%m-%d %H:%M:%S} UTC"
    assert valid.validity_problem() is None
    assert valid.validity_problem(valid.not_after + timedelta(seconds=1)) is not None


def test_same_dn_ignores_case_and_spacing(pki: Pki) -> None:
    server = first_pem_certificate(pki.server_keystore.read_text())
    other = first_pem_certificate(pki.other_name_server_keystore.read_text())
    assert server is not None and other is not None
    assert not server.same_dn(other)
    shouted = type(server)(server.not_before, server.not_after,
                           (("2.5.4.3", " LOCALHOST "),), server.subject_alt_names)
    assert server.same_dn(shouted)


@pytest.mark.parametrize("cut", [1, 10, 100, -1])
def test_truncated_or_garbled_der_is_a_certificate_error(pki: Pki, cut: int) -> None:
    der = ssl.PEM_cert_to_DER_cert(pki.server_cert.read_text())
    broken = der[:cut] if cut > 0 else bytes(len(der))
    with pytest.raises(CertificateError):
        parse_certificate(broken)


def test_no_certificate_in_the_pem(pki: Pki) -> None:
    assert first_pem_certificate(pki.server_key.read_text()) is None
