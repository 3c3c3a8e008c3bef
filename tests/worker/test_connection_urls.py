"""Redis URLs: secrets never reach messages; schemes pick the client; bad URLs say why."""

from __future__ import annotations

import pytest
import redis
import redis.cluster
from antre import connection, errors


@pytest.mark.parametrize(("url", "shown"), [
    pytest.param("redis://:s3cret@h:6380/0", "redis://:***@h:6380/0", id="password"),
    pytest.param("redis://user:s3cret@h/0", "redis://user:***@h/0", id="user-and-password"),
    pytest.param("redis://h:6380/0?password=s3cret&db=1", "redis://h:6380/0?password=***&db=1",
                 id="password-query"),
    pytest.param("rediss://:pa/ss@h:6380/0", "rediss://:***@h:6380/0", id="unescaped-slash"),
    pytest.param("redis://:p@ss@h:6380/0", "redis://:***@h:6380/0", id="unescaped-at"),
    pytest.param("unix:///run/redis.sock?password=x", "unix:///run/redis.sock?password=***",
                 id="unix-socket"),
    pytest.param("redis://h:6380/0", "redis://h:6380/0", id="nothing-secret"),
])
def test_redact_hides_every_secret(url: str, shown: str) -> None:
    assert connection.redact(url) == shown
    assert "s3cret" not in connection.redact(url)


def test_scheme_selects_the_client() -> None:
    assert isinstance(connection.connect("redis://127.0.0.1:1/0"), redis.Redis)
    assert connection.is_cluster_url("redis+cluster://127.0.0.1:7000")
    assert not connection.is_cluster_url("rediss://127.0.0.1:6380/0")


@pytest.mark.parametrize("url", [
    pytest.param("http://:s3cret@h/0", id="wrong-scheme"),
    pytest.param("localhost:6380", id="no-scheme"),
])
def test_bad_urls_are_refused_without_the_password(url: str) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        connection.connect(url)
    assert "redis url" in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize("make", [connection.connect, connection.connect_async],
                         ids=["sync", "async"])
def test_connections_announce_the_installed_redis_py_version(make) -> None:
    """antre gives redis-py its version once instead of letting every new connection look it
    up in the package metadata; what a connection announces (CLIENT SETINFO lib-ver) is still
    the installed distribution's version."""
    from importlib import metadata

    client = make("redis://127.0.0.1:1/0")
    first = client.connection_pool.make_connection()
    second = client.connection_pool.make_connection()
    assert first.driver_info.lib_version == metadata.version("redis")
    assert first.driver_info.formatted_name == "redis-py"
    assert second.driver_info is first.driver_info
