"""URL options the installed redis-py's clients do not take are refused before connecting
(``antre.redis_py_options``), instead of a TypeError and a traceback at the first command.

Aspects: the decision, on what releases 5.0.1, 7.1.1, 7.2.0 and 8.1.0 were found to take
(recorded here from their wheels): an option the client does not take is one line naming it,
the first release that takes it, the installed one and who uses that client, or, when no
release does, that it is not taken; what the client takes passes; nothing is refused when what
it takes cannot be told. The table wording the refusals says what the installed redis-py takes,
and the recorded findings of its release are what is found in it now. Every URL entry point
asks the right client: sync and asyncio, plain, Sentinel and Cluster URLs. On the suite's
redis-py, the asyncio cluster client takes no ``ssl_password``: ``antre worker`` and ``antre
api`` say so in one line, exit 2.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis
from antre import connection, errors, redis_py_options, redis_urls
from antre.redis_py_options import ASYNCIO, ASYNCIO_CLUSTER, SYNC, SYNC_CLUSTER
from redis_py_table import disagreements
from redis_servers import child_env

#: URL options each client over TLS did not take, found with ``redis_py_options.taken`` in
#: virtualenvs holding each release's wheel (and checked against a TLS redis-server, Sentinel
#: and Cluster: each one failed at the first command, or was dropped by the sync cluster client).
NOT_TAKEN_BY: dict[str, dict[str, set[str]]] = {
    "5.0.1": {
        SYNC: {"socket_read_size", "ssl_ciphers", "ssl_min_version"},
        ASYNCIO: {"socket_read_size", "ssl_ca_path", "ssl_ciphers", "ssl_min_version",
                  "ssl_password"},
        SYNC_CLUSTER: {"ssl_ca_path", "ssl_check_hostname", "ssl_ciphers", "ssl_min_version"},
        ASYNCIO_CLUSTER: {"retry_on_timeout", "socket_read_size", "ssl_ca_path", "ssl_ciphers",
                          "ssl_min_version", "ssl_password"},
    },
    "7.1.1": {
        SYNC: {"socket_read_size", "ssl_min_version"},
        ASYNCIO: {"socket_read_size", "ssl_ca_path", "ssl_min_version", "ssl_password"},
        SYNC_CLUSTER: {"ssl_ca_path", "ssl_ciphers", "ssl_min_version"},
        ASYNCIO_CLUSTER: {"retry_on_timeout", "socket_read_size", "ssl_ca_path",
                          "ssl_min_version", "ssl_password"},
    },
    "7.2.0": {
        SYNC: {"socket_read_size", "ssl_min_version"},
        ASYNCIO: {"socket_read_size", "ssl_min_version"},
        SYNC_CLUSTER: {"ssl_ciphers", "ssl_min_version"},
        ASYNCIO_CLUSTER: {"retry_on_timeout", "socket_read_size", "ssl_ca_path",
                          "ssl_min_version", "ssl_password"},
    },
    "8.1.0": {
        SYNC: set(),
        ASYNCIO: set(),
        SYNC_CLUSTER: {"ssl_ciphers", "ssl_min_version"},
        ASYNCIO_CLUSTER: {"retry_on_timeout", "ssl_ca_path", "ssl_password"},
    },
}

ASYNC_USERS = "which the worker, the API and antre.AsyncQueue use"
SYNC_USERS = "which antre.Queue and the command line use"


def decide(installed: str, client: str, *names: str) -> str | None:
    takes = frozenset(redis_urls.URL_OPTIONS - NOT_TAKEN_BY[installed][client])
    return redis_py_options.refusal(names, client=client, takes=takes, installed=installed)


@pytest.mark.parametrize("installed, client, option, said", [
    ("5.0.1", ASYNCIO, "ssl_password",
     f"redis url: ssl_password needs redis-py 7.2 or later (installed: 5.0.1) for the asyncio "
     f"client, {ASYNC_USERS}; upgrade redis or remove the parameter"),
    ("5.0.1", ASYNCIO, "ssl_ca_path",
     f"redis url: ssl_ca_path needs redis-py 7.2 or later (installed: 5.0.1) for the asyncio "
     f"client, {ASYNC_USERS}; upgrade redis or remove the parameter"),
    ("7.1.1", ASYNCIO, "ssl_password",
     f"redis url: ssl_password needs redis-py 7.2 or later (installed: 7.1.1) for the asyncio "
     f"client, {ASYNC_USERS}; upgrade redis or remove the parameter"),
    ("5.0.1", SYNC, "ssl_ciphers",
     f"redis url: ssl_ciphers needs redis-py 5.0.4 or later (installed: 5.0.1) for the sync "
     f"client, {SYNC_USERS}; upgrade redis or remove the parameter"),
    ("7.2.0", ASYNCIO, "ssl_min_version",
     f"redis url: ssl_min_version needs redis-py 8.1 or later (installed: 7.2.0) for the "
     f"asyncio client, {ASYNC_USERS}; upgrade redis or remove the parameter"),
    ("7.2.0", SYNC, "socket_read_size",
     f"redis url: socket_read_size needs redis-py 8.0 or later (installed: 7.2.0) for the sync "
     f"client, {SYNC_USERS}; upgrade redis or remove the parameter"),
    ("5.0.1", SYNC_CLUSTER, "ssl_check_hostname",
     f"redis url: ssl_check_hostname needs redis-py 6.1 or later (installed: 5.0.1) for the "
     f"sync cluster client, {SYNC_USERS}; upgrade redis or remove the parameter"),
    ("8.1.0", SYNC_CLUSTER, "ssl_min_version",
     f"redis url: ssl_min_version needs redis-py 8.2 or later (installed: 8.1.0) for the sync "
     f"cluster client, {SYNC_USERS}; upgrade redis or remove the parameter"),
    ("8.1.0", ASYNCIO_CLUSTER, "ssl_password",
     f"redis url: ssl_password: redis-py 8.1.0 does not take it in the asyncio cluster client, "
     f"{ASYNC_USERS}; remove the parameter"),
    ("8.1.0", ASYNCIO_CLUSTER, "retry_on_timeout",
     f"redis url: retry_on_timeout: redis-py 8.1.0 does not take it in the asyncio cluster "
     f"client, {ASYNC_USERS}; remove the parameter"),
])
def test_an_option_the_release_does_not_take_is_refused(installed: str, client: str, option: str,
                                                        said: str) -> None:
    assert decide(installed, client, "db", option, "socket_timeout") == said


@pytest.mark.parametrize("installed, client, option", [
    ("5.0.1", SYNC, "ssl_password"),  # the sync connections took it from the start
    ("5.0.1", SYNC, "ssl_ca_path"),
    ("5.0.1", SYNC_CLUSTER, "ssl_password"),
    ("7.2.0", ASYNCIO, "ssl_password"),
    ("7.2.0", ASYNCIO, "ssl_ca_path"),
    ("7.1.1", ASYNCIO, "ssl_ciphers"),
    ("8.1.0", ASYNCIO, "ssl_min_version"),
    ("8.1.0", ASYNCIO_CLUSTER, "ssl_min_version"),
    ("8.1.0", SYNC, "socket_read_size"),
])
def test_an_option_the_release_takes_passes(installed: str, client: str, option: str) -> None:
    assert decide(installed, client, option, "ssl_ca_certs", "client_name") is None


def test_the_first_option_not_taken_is_named() -> None:
    said = decide("5.0.1", ASYNCIO, "ssl_certfile", "ssl_password", "ssl_ciphers")
    assert said is not None and said.startswith("redis url: ssl_password needs")


def test_nothing_is_refused_when_what_is_taken_cannot_be_told() -> None:
    assert redis_py_options.refusal(["ssl_password"], client=ASYNCIO, takes=None,
                                    installed="5.0.1") is None


def test_versions_compare_as_releases() -> None:
    version = redis_py_options.version
    assert version("5.0.1") < version("5.0.4") < version("7.2") <= version("7.2.0")
    assert version("8.0.0b1") == (8, 0, 0) and version("10.0.0") > version("8.2")


def test_the_table_says_what_the_installed_redis_py_takes() -> None:
    assert disagreements() == []


def test_the_recorded_findings_are_those_of_the_installed_release() -> None:
    recorded = NOT_TAKEN_BY.get(redis.__version__)
    # The suite pins its redis-py (tests/constraints.txt): a new pin records its findings here.
    assert recorded is not None, f"record redis-py {redis.__version__}'s findings in NOT_TAKEN_BY"
    for client, names in recorded.items():
        takes = redis_py_options.taken(client, tls=True)
        assert takes is not None and redis_urls.URL_OPTIONS - takes == names, client


@pytest.fixture
def as_if_5_0_1(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """redis-py 5.0.1's findings in place of the installed release's; the calls are listed."""
    asked: list[tuple[str, bool]] = []

    def taken(client: str, *, tls: bool, sync_parser: bool | None = None) -> frozenset[str]:
        asked.append((client, tls))
        return frozenset(redis_urls.URL_OPTIONS - NOT_TAKEN_BY["5.0.1"][client])

    monkeypatch.setattr(redis_py_options, "taken", taken)
    monkeypatch.setattr(redis, "__version__", "5.0.1")
    return asked


@pytest.mark.parametrize("url, sync, client", [
    ("rediss://127.0.0.1:1/0?ssl_password=x", False, ASYNCIO),
    ("rediss+sentinel://127.0.0.1:1/mymaster/0?ssl_ca_path=/ca", False, ASYNCIO),
    ("rediss://127.0.0.1:1/0?ssl_ciphers=HIGH", True, SYNC),
    ("rediss+sentinel://127.0.0.1:1/mymaster?ssl_min_version=771", True, SYNC),
    ("rediss+cluster://127.0.0.1:1?ssl_check_hostname=true", True, SYNC_CLUSTER),
    ("rediss+cluster://127.0.0.1:1?retry_on_timeout=true", False, ASYNCIO_CLUSTER),
])
def test_each_entry_point_asks_its_client(as_if_5_0_1: list[tuple[str, bool]], url: str,
                                          sync: bool, client: str) -> None:
    connect = connection.connect if sync else connection.connect_async
    with pytest.raises(errors.InvalidArgument) as info:
        connect(url)
    assert f"(installed: 5.0.1) for the {client} client" in str(info.value) or (
        f"redis-py 5.0.1 does not take it in the {client} client" in str(info.value))
    assert as_if_5_0_1 == [(client, True)]


async def test_what_the_client_takes_connects_as_before(as_if_5_0_1: list[tuple[str, bool]]
                                                        ) -> None:
    connection.connect("rediss://127.0.0.1:1/0?ssl_password=x&ssl_ca_path=/ca").close()
    await connection.connect_async("redis://127.0.0.1:1/0?socket_timeout=1").aclose()
    assert as_if_5_0_1 == [(SYNC, True), (ASYNCIO, False)]


@pytest.mark.parametrize("command", [["worker", "--handlers", "antre.example_handlers"],
                                     ["api", "--no-auth", "--port", "0"]])
def test_the_command_line_refuses_in_one_line(command: list[str]) -> None:
    """Before: the asyncio cluster client's TypeError, a traceback, exit 1."""
    proc = subprocess.run([sys.executable, "-m", "antre", *command, "--redis-url",
                           "rediss+cluster://127.0.0.1:1?ssl_password=x"],
                          capture_output=True, text=True, env=child_env(), timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if '"level"' not in line]
    assert line == (f"antre {command[0]}: redis url: ssl_password: redis-py {redis.__version__} "
                    f"does not take it in the asyncio cluster client, {ASYNC_USERS}; remove the "
                    f"parameter"), proc.stderr


class _ClusterOfRedisPy72:
    """The shape of redis-py 7.2.0-7.2.2's asyncio ``RedisCluster.__init__``: named keywords,
    no ``**kwargs``, no ``driver_info``."""

    def __init__(self, host: str | None = None, port: int = 6379, *,
                 decode_responses: bool = False, socket_timeout: float | None = None) -> None:
        pass


def test_a_cluster_client_is_given_driver_info_only_if_it_takes_it() -> None:
    """Given it anyway, redis-py 7.2.0-7.2.2's asyncio cluster client failed every
    ``redis+cluster://`` URL with a TypeError (seen in a 7.2.0 virtualenv against a cluster)."""
    assert not redis_py_options.constructor_takes(_ClusterOfRedisPy72, "driver_info")
    assert "driver_info" not in connection._cluster_options(
        "redis://127.0.0.1:1", _ClusterOfRedisPy72, {})
    # The suite's redis-py (8.1) takes it, and is given it: one version lookup, not one per
    # connection (connection._driver_info).
    takes = redis_py_options.constructor_takes(redis.asyncio.cluster.RedisCluster, "driver_info")
    given = connection._cluster_options("redis://127.0.0.1:1", redis.asyncio.cluster.RedisCluster, {})
    assert takes and "driver_info" in given
    assert "health_check_interval" not in given
