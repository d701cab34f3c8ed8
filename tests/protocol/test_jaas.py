"""sasl.jaas.config as Kafka reads it: one login module, a flag, name=value options."""

from __future__ import annotations

import pytest

from klog.protocol.jaas import PLAIN_LOGIN_MODULE, JaasConfigError, parse_jaas_config


def test_plain_login_module_users_and_own_credentials() -> None:
    entry = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required\n'
        '  username="admin" password="admin-secret"\n'
        '  user_admin="admin-secret" user_alice="al\\"ice;pw" user_bob=bare;')
    assert entry.login_module == PLAIN_LOGIN_MODULE and entry.flag == "required"
    assert entry.options["username"] == "admin"
    assert entry.plain_users == {"admin": "admin-secret", "alice": 'al"ice;pw', "bob": "bare"}


@pytest.mark.parametrize("text", [
    "",
    "org.example.Module",  # no flag
    "org.example.Module required a=1",  # no ';'
    "org.example.Module required a=;",
    "org.example.Module required; org.example.Other required;",  # two modules
    "org.example.Module sometimes;",
])
def test_malformed_configs_are_refused(text: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)
