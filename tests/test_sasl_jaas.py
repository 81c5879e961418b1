"""Kafka's sasl.jaas.config syntax: PLAIN's users, the client's username/password, and refusals naming where."""

from __future__ import annotations

import pytest

from idemcore.net.jaas import (
    PLAIN_LOGIN_MODULE,
    JaasConfigError,
    jaas_for_mechanism,
    parse_jaas_config,
)


def test_kafkas_documented_plain_config() -> None:
    config = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required \n'
        '    username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice;secret";')
    assert (config.login_module, config.flag) == (PLAIN_LOGIN_MODULE, "required")
    assert config.plain_users() == {"admin": "admin-secret", "alice": "alice;secret"}
    assert config.client_credentials() == ("admin", "admin-secret")
    assert "secret" not in repr(config)


def test_words_quotes_escapes_and_comments() -> None:
    config = parse_jaas_config(
        "org.apache.kafka.common.security.scram.ScramLoginModule Required /* note */ username=bob.1 "
        "password='single quoted' // trailing\n user_x=\"a\\\"b\\\\c\\n\";")
    assert config.flag == "required"
    assert config.options == {"username": "bob.1", "password": "single quoted", "user_x": 'a"b\\c\n'}


def test_unquoted_and_empty_values() -> None:
    config = parse_jaas_config('m.Module optional user_bob="" user_=x;')
    assert config.plain_users() == {"bob": ""}


@pytest.mark.parametrize(("text", "says"), [
    ("", "contains 0 login modules"),
    ('a.B required; c.D required;', "contains 2 login modules"),
    ('a.B mandatory;', "expected a control flag .* at character 5"),
    ('a.B required user_x="y"', "expected an option name or ';' at character 24 \\(the end\\)"),
    ('a.B required user_x "y";', "expected '=' after option user_x at character 21"),
    ('a.B required user_x=;', "expected a value for option user_x at character 21"),
    ('a.B required user_x="y;', "a quoted value is not closed at character 21"),
    ('a.B required /* x', "a comment is not closed"),
    ('"a.B" required;', "expected a login module class name at character 1"),
])
def test_errors_name_the_position(text: str, says: str) -> None:
    with pytest.raises(JaasConfigError, match=says):
        parse_jaas_config(text)


def test_the_mechanism_takes_its_login_module() -> None:
    plain = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'
    assert jaas_for_mechanism(plain, "PLAIN").plain_users() == {"a": "b"}
    with pytest.raises(JaasConfigError, match=r"names org\.apache\.kafka\.common\.security\.plain\.PlainLoginModule"):
        jaas_for_mechanism(plain, "SCRAM-SHA-256")
    with pytest.raises(JaasConfigError, match="GSSAPI"):
        jaas_for_mechanism(plain, "GSSAPI")
    with pytest.raises(JaasConfigError, match="no password option"):
        parse_jaas_config('a.B required username="x";').client_credentials()


@pytest.mark.parametrize("text", [
    'a.B required user_x "hunter2";',
    'a.B required user_x="hunter2;',
    'a.B required user_x=;user_y="hunter2";',
    'a.B required user_x="hunter2" "x";',
    'a.B mandatory user_x="hunter2";',
    'a.B required user_x=hunter2 !;',
])
def test_a_refused_jaas_config_does_not_show_its_passwords(text):
    with pytest.raises(JaasConfigError) as refused:
        parse_jaas_config(text)
    assert "hunter2" not in str(refused.value) and "at character" in str(refused.value)
