"""``redis+sentinel://`` URLs, parsed without any server: the Sentinels, the service, the
servers' and the Sentinels' options; bad URLs get one line that never holds the password."""

from __future__ import annotations

import pytest
from antre import connection, errors, sentinel, sentinel_urls


def test_every_part_of_the_url() -> None:
    parsed = sentinel_urls.parse_url(
        "rediss+sentinel://app:p%40ss@s1:26380,s2,[::1]:26381/mymaster/3"
        "?ssl_ca_certs=/ca.pem&sentinel_password=guard&min_other_sentinels=1")
    assert parsed.sentinels == (("s1", 26380), ("s2", 26379), ("::1", 26381))
    assert parsed.service == "mymaster"
    assert parsed.tls
    assert parsed.min_other_sentinels == 1
    assert parsed.server_options == {"username": "app", "password": "p@ss", "db": 3,
                                     "ssl": True, "ssl_ca_certs": "/ca.pem"}
    assert parsed.sentinel_options["password"] == "guard"
    assert parsed.sentinel_options["ssl"] is True
    assert "username" not in parsed.sentinel_options  # the servers' user is not the Sentinels'


def test_defaults() -> None:
    parsed = sentinel_urls.parse_url("redis+sentinel://sentinel/mymaster")
    assert parsed.sentinels == (("sentinel", sentinel_urls.DEFAULT_PORT),)
    assert parsed.server_options == {"db": 0}
    assert not parsed.tls and parsed.min_other_sentinels == 0
    assert "password" not in parsed.sentinel_options


@pytest.mark.parametrize(("url", "expected"), [
    pytest.param("redis+sentinel://s1:26379/", "service name is missing", id="no-service"),
    pytest.param("redis+sentinel://s1:26379", "service name is missing", id="no-path"),
    pytest.param("redis+sentinel:///mymaster", "no Sentinel address", id="no-host"),
    pytest.param("redis+sentinel://s1:notaport/mymaster", "port must be a number", id="bad-port"),
    pytest.param("redis+sentinel://s1:70000/mymaster", "port must be a number", id="big-port"),
    pytest.param("redis+sentinel://:1/mymaster", "the host is missing", id="empty-host"),
    pytest.param("redis+sentinel://[::1/mymaster", "IPv6", id="unclosed-v6"),
    pytest.param("redis+sentinel://s1/mymaster/x", "/service/db", id="bad-db"),
    pytest.param("redis+sentinel://s1/a/1/2", "/service/db", id="long-path"),
    pytest.param("redis+sentinel://s1/m?min_other_sentinels=two", "min_other_sentinels",
                 id="bad-minimum"),
])
def test_bad_urls_say_what_is_wrong_without_the_password(url: str, expected: str) -> None:
    url = url.replace("://", "://app:s3cret@", 1)
    with pytest.raises(errors.InvalidArgument) as caught:
        connection.connect(url)
    message = str(caught.value)
    assert expected in message
    assert "s3cret" not in message
    assert len(message.splitlines()) == 1


def test_redact_hides_the_sentinels_password_too() -> None:
    url = "redis+sentinel://app:s3cret@s1,s2/m?sentinel_password=guard&sentinel_username=ops"
    shown = connection.redact(url)
    assert "s3cret" not in shown and "guard" not in shown and "ops" not in shown
    assert shown.startswith("redis+sentinel://app:***@s1,s2/m?")


def test_scheme_selects_a_sentinel_client_that_connects_lazily() -> None:
    client = connection.connect("redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster")
    try:
        assert isinstance(client, sentinel.SentinelRedis)
        assert not connection.is_cluster_url("rediss+sentinel://s1/mymaster")
        assert sentinel_urls.is_sentinel_url("REDIS+SENTINEL://s1/mymaster")
    finally:
        client.close()


@pytest.mark.parametrize("password", ["S3cr?et", "S3cr/et", "S3cr#et", "S3c@ret", "S3cr:et"])
def test_a_password_with_unescaped_delimiters_is_read_whole(password: str) -> None:
    """The user info ends at the last '@', so an unescaped '?', '/', '#', '@' or ':' in the
    password stays in it (redis-py alone would read 'S3cr' as a port and quote it in its
    message)."""
    parsed = sentinel_urls.parse_url(f"redis+sentinel://app:{password}@s1:26379/mymaster/2")
    assert parsed.server_options["password"] == password
    assert parsed.server_options["username"] == "app"
    assert parsed.sentinels == (("s1", 26379),) and parsed.server_options["db"] == 2


def test_a_bad_option_value_is_named_without_the_password() -> None:
    """The option, its value and what it may be, as for redis:// URLs: the query follows the
    last '@', so a value is never a piece of the password, which is never shown."""
    with pytest.raises(errors.InvalidArgument) as caught:
        sentinel_urls.parse_url("redis+sentinel://:S3cret@s1/m?socket_timeout=abc")
    message = str(caught.value)
    assert message == ("query option socket_timeout: got 'abc'; must be a number of seconds "
                       ">= 0 (e.g. 5 or 0.5)")
    with pytest.raises(errors.InvalidArgument) as caught:
        sentinel_urls.parse_url("redis+sentinel://:S3cret@s1/m?sslmode=require")
    assert "S3cret" not in str(caught.value) and "unknown query option 'sslmode'" in str(
        caught.value)

