"""What every process refuses in a Redis URL before connecting (``antre.redis_urls``).

Aspects: an unknown query option (``?sslmode=require``, a typo), in any URL Sentinel ones
included, is one line naming it, from the library and the command line, instead of redis-py's
TypeError at the first command; so is an option value redis-py cannot take
(``?socket_timeout=abc``), naming the option, the value and what is allowed; so is an
option the URL's connection has no use for (a TLS option without TLS, ``socket_keepalive`` on a
unix socket: a TypeError on every redis-py release), and ``?timeout=`` (only redis-py's
BlockingConnectionPool takes it); the option list stays within what the installed redis-py
takes. With ``ANTRE_REDIS_TLS=true`` (what the
operator sets for a JobQueue with spec.redis.tls) the worker, the reaper and the API refuse a
plain-text URL and never open a connection, so a password in it never crosses the network; a
TLS URL passes the check. A bad ANTRE_REDIS_TLS value is a usage error.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import redis
import redis.asyncio.connection
import redis.connection
from antre import connection, errors, redis_urls
from redis_servers import child_env, running_redis

ANTRE = [sys.executable, "-m", "antre"]


def _init_parameters(*classes: type) -> set[str]:
    names: set[str] = set()
    for cls in classes:
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            names |= {p.name for p in inspect.signature(init).parameters.values()
                      if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names


def test_every_url_option_is_one_redis_py_takes() -> None:
    for module in (redis.connection, redis.asyncio.connection):
        taken = set(module.URL_QUERY_ARGUMENT_PARSERS) | _init_parameters(module.SSLConnection)
        assert taken >= redis_urls.URL_OPTIONS, redis_urls.URL_OPTIONS - taken


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0?sslmode=require",
                                 "redis+cluster://127.0.0.1:1?foo=1",
                                 "redis+sentinel://127.0.0.1:1/mymaster/0?sslmode=require",
                                 "rediss+sentinel://127.0.0.1:1/mymaster?min_other_sentinels=1&foo=1"])
def test_an_unknown_option_is_named_before_connecting(url: str) -> None:
    for connect in (connection.connect, connection.connect_async):
        with pytest.raises(errors.InvalidArgument, match=r"unknown query option '(sslmode|foo)'"):
            connect(url)


@pytest.mark.parametrize("url, option, got, allowed", [
    ("redis://127.0.0.1:1/0?socket_timeout=abc", "socket_timeout", "'abc'", "a number of seconds"),
    ("redis://127.0.0.1:1/0?socket_connect_timeout=nan", "socket_connect_timeout", "'nan'",
     "a number of seconds"),
    ("redis+cluster://127.0.0.1:1?max_connections=-1", "max_connections", "'-1'",
     "a whole number"),
    ("redis://127.0.0.1:1/0?retry_on_timeout=sometimes", "retry_on_timeout", "'sometimes'",
     "true or false"),
    ("redis://127.0.0.1:1/0?protocol=4", "protocol", "'4'", "2 or 3"),
    ("redis+sentinel://127.0.0.1:1/mymaster/0?socket_timeout=abc", "socket_timeout", "'abc'",
     "a number of seconds"),
    ("redis://127.0.0.1:1/0?socket_timeout=" + "x" * 50, "socket_timeout", "(not shown)",
     "a number of seconds"),
])
def test_a_bad_option_value_is_named_before_connecting(url: str, option: str, got: str,
                                                       allowed: str) -> None:
    """A value redis-py cannot take was refused only at connect time (the operator reported
    an unreachable Redis), and one it reads wrongly (any text is a true boolean) passed."""
    for connect in (connection.connect, connection.connect_async):
        with pytest.raises(errors.InvalidArgument) as info:
            connect(url)
        assert f"query option {option}: got {got}; must be {allowed}" in str(info.value)


@pytest.mark.parametrize("url, option, scheme", [
    ("redis://127.0.0.1:1/0?ssl_ca_certs=/ca.pem", "ssl_ca_certs", "redis"),
    ("unix:///run/redis.sock?ssl_cert_reqs=none", "ssl_cert_reqs", "unix"),
    ("redis+cluster://127.0.0.1:1?ssl_check_hostname=false", "ssl_check_hostname",
     "redis+cluster"),
    ("redis+sentinel://127.0.0.1:1/mymaster/0?ssl_password=x", "ssl_password",
     "redis+sentinel"),
])
def test_a_tls_option_without_tls_is_named_before_connecting(url: str, option: str,
                                                             scheme: str) -> None:
    """redis-py handed it to a plain connection: a TypeError at the first command."""
    for connect in (connection.connect, connection.connect_async):
        with pytest.raises(errors.InvalidArgument) as info:
            connect(url)
        assert (f"query option {option}: a TLS option, and the scheme is {scheme}:// (no TLS); "
                "use rediss://") in str(info.value)


def test_socket_keepalive_on_a_unix_socket_is_named_before_connecting() -> None:
    for connect in (connection.connect, connection.connect_async):
        with pytest.raises(errors.InvalidArgument, match=r"query option socket_keepalive: a TCP "
                           r"option, and the scheme is unix://"):
            connect("unix:///run/redis.sock?socket_keepalive=true")


def test_timeout_is_no_url_option() -> None:
    """redis-py converts ?timeout= but only its BlockingConnectionPool takes it: the
    connections of antre's clients failed with a TypeError at the first command."""
    for connect in (connection.connect, connection.connect_async):
        with pytest.raises(errors.InvalidArgument, match=r"unknown query option 'timeout'"):
            connect("redis://127.0.0.1:1/0?timeout=5")


def test_tls_options_with_tls_pass() -> None:
    redis_urls.check_url("rediss://h:6380/0?ssl_ca_certs=/ca.pem&ssl_cert_reqs=required"
                         "&ssl_check_hostname=true&socket_keepalive=true")
    redis_urls.check_url("rediss+cluster://h:6380?ssl_ca_certs=/ca.pem")
    redis_urls.check_url("unix:///run/redis.sock?db=1&socket_timeout=1")


def test_good_option_values_pass() -> None:
    redis_urls.check_url_options("redis://h:6379/0?socket_timeout=0.5&socket_keepalive=yes"
                                 "&protocol=3&max_connections=10&retry_on_timeout=&db=2")


def test_a_value_that_may_be_part_of_a_password_is_not_shown() -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        redis_urls.check_url_options("redis://:pa?socket_timeout=secret&x=@h:6379/0")
    assert "secret" not in str(info.value) and "(not shown)" in str(info.value)


@pytest.mark.parametrize("url, shown", [
    ("redis://127.0.0.1:1/abc", "'abc'"),
    ("redis://127.0.0.1:1/1x", "'1x'"),
    ("redis://127.0.0.1:1/0/1", "'0/1'"),
    ("rediss://127.0.0.1:1/0//?socket_timeout=1", "'0/'"),
    ("redis+cluster://127.0.0.1:1/db0", "'db0'"),
    ("redis://:pa/ss@127.0.0.1:1/" + "x" * 50, "(not shown)"),
])
def test_a_database_path_that_is_not_a_number_is_refused(url: str, shown: str) -> None:
    """redis-py used database 0 for /abc and /1x, and database 1 for /0/1 (the digits run
    together), so jobs went quietly to another database than the operator reads."""
    for connect in (connection.connect, connection.connect_async):
        with pytest.raises(errors.InvalidArgument) as info:
            connect(url)
        message = str(info.value)
        assert message.startswith(f"redis url: database {shown}: the path must be a database "
                                  f"number"), message
        assert "pa/ss" not in message


@pytest.mark.parametrize("url", ["redis://h:6379", "redis://h:6379/", "redis://h:6379/15",
                                 "rediss://:pa/ss@h:6379/0", "unix:///run/redis.sock?db=2",
                                 "redis+cluster://h:6379/0?socket_timeout=1",
                                 # redis-py reads these as database 0 and defaults, and so
                                 # did antre before it checked paths and values
                                 "redis://h:6379/0/", "redis://h:6379/3/?db=",
                                 "redis://h:6379/0?socket_timeout=&max_connections=&protocol="])
def test_a_database_path_that_is_a_number_passes(url: str) -> None:
    redis_urls.check_url(url)


def test_the_command_line_refuses_a_database_path_and_writes_nothing() -> None:
    with running_redis() as server:
        proc = subprocess.run([*ANTRE, "enqueue", "t", "{}", "--queue", "DBTEST",
                               "--redis-url", f"{server.url.rsplit('/', 1)[0]}/abc"],
                              capture_output=True, text=True, env=child_env(), timeout=30,
                              check=False)
        keys = redis.Redis.from_url(server.url).dbsize()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "antre enqueue: redis url: database 'abc': the path must be a database number from 0 to "
        "999999999 and nothing else (e.g. redis://host:6379/0), or empty for 0"], proc.stderr
    assert keys == 0, "nothing was enqueued in database 0"


def test_an_option_name_that_may_be_a_password_is_not_shown() -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        redis_urls.check_url_options("redis://:pa?ss/word@h:6379/0")
    assert "ss/word" not in str(info.value) and "(not shown)" in str(info.value)


@pytest.mark.parametrize("sentinel", [False, True], ids=["redis", "sentinel"])
@pytest.mark.parametrize("query, said", [
    ("sslmode=require", "unknown query option 'sslmode'"),
    ("socket_timeout=abc", "query option socket_timeout: got 'abc'; must be a number of seconds"),
    ("ssl_ca_certs=/ca.pem", "query option ssl_ca_certs: a TLS option, and the scheme is redis"),
])
def test_the_command_line_names_a_bad_option(query: str, said: str, sentinel: bool) -> None:
    with running_redis() as server:
        url = (f"redis+sentinel://127.0.0.1:{server.port}/mymaster/0?{query}" if sentinel
               else f"{server.url}?{query}")
        proc = subprocess.run([*ANTRE, "stats", "--redis-url", url],
                              capture_output=True, text=True, env=child_env(), timeout=30,
                              check=False)
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def connections_received(server_url: str) -> int:
    return int(redis.Redis.from_url(server_url).info("stats")["total_connections_received"])


@pytest.mark.parametrize("command", [["worker"], ["reaper", "--once"], ["api", "--port", "0"]])
def test_with_tls_required_a_plain_url_is_refused_before_connecting(command: list[str]) -> None:
    with running_redis() as server:
        url = f"redis://:hunter2@127.0.0.1:{server.port}/0"
        before = connections_received(server.url)
        env = {**child_env(), "ANTRE_REDIS_URL": url, "ANTRE_REDIS_TLS": "true",
               "ANTRE_API_TOKEN": "t" * 32}
        proc = subprocess.run([*ANTRE, *command], capture_output=True, text=True, env=env,
                              timeout=30, check=False)
        after = connections_received(server.url)
    assert proc.returncode == 2, proc.stderr
    assert "--redis-tls (ANTRE_REDIS_TLS) is set, so the URL must use TLS" in proc.stderr
    assert "hunter2" not in proc.stderr and "Traceback" not in proc.stderr
    assert after == before + 1, "only our own INFO connected: the command never did"


def test_a_tls_url_passes_the_check() -> None:
    redis_urls.require_tls("rediss://:pw@redis:6380/0")
    redis_urls.require_tls("rediss+sentinel://s1:26379/mymaster")
    with pytest.raises(errors.InvalidArgument):
        redis_urls.require_tls("unix:///run/redis.sock")


def test_a_bad_tls_setting_is_a_usage_error() -> None:
    proc = subprocess.run([*ANTRE, "stats"], capture_output=True, text=True, timeout=30,
                          env={**child_env(), "ANTRE_REDIS_TLS": "maybe"}, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "antre: ANTRE_REDIS_TLS: got 'maybe'; must be true or false"
