"""A TLS client's principal: the subject DN as Java writes it, and
ssl.principal.mapping.rules as Kafka's SslPrincipalMapper applies them."""

from __future__ import annotations

import pytest

from klog.daemon.security.ssl_principal import (
    NoMatchingRuleError,
    SslPrincipalMapper,
    distinguished_name,
)


def test_subject_is_written_in_rfc2253_order_with_escapes() -> None:
    peercert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                            (("organizationalUnitName", "eng"),), (("commonName", "client"),))}
    assert distinguished_name(peercert) == "CN=client,OU=eng,O=Acme\\, Inc,C=US"
    email = {"subject": ((("commonName", "a"),), (("emailAddress", "a@b.c"),))}
    assert distinguished_name(email) == "1.2.840.113549.1.9.1=#16056140622e63,CN=a"


def test_kafka_rule_examples() -> None:
    # The rules and DNs of Kafka's SslPrincipalMapperTest.
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")
    assert mapper.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US") \
        == "duke@javasoft"
    assert mapper.name("OU=JavaSoft,CN=duke,O=Sun") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") \
        == "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert SslPrincipalMapper().name("CN=a,O=b") == "CN=a,O=b"


def test_no_matching_rule_and_malformed_rules() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRuleError):
        mapper.name("CN=someone,OU=Other")
    for rules in ("RULE:abc", "nonsense", "RULE:[/x/"):
        with pytest.raises(ValueError):
            SslPrincipalMapper(rules)
