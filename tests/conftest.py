"""Shared fixtures: a session-wide real redis-server, a flushed client per test; the grouping
of tests for parallel runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import run_report
from antre import logs
from redis_servers import RedisServer

TESTS = Path(__file__).resolve().parent
# Directories whose tests share one costly session fixture: under `pytest -n N --dist loadgroup`
# (scripts/test.sh) each stays on one worker, so the Kubernetes control plane starts once.
_ONE_WORKER_DIRECTORIES = ("e2e",)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups from the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        top = item.path.relative_to(TESTS).parts[0]
        if top in _ONE_WORKER_DIRECTORIES:
            item.add_marker(pytest.mark.xdist_group(top))


_report_lines: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    # A new list: the report's list is the item's own, shared by its three phases' reports.
    report.user_properties = [*report.user_properties, *run_report.take_pending()]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _report_lines.extend(run_report.lines_of(report.user_properties))


@pytest.fixture(scope="session")
def figures() -> list[str]:
    """Lines a test appends to show in the run's summary (see :mod:`run_report`)."""
    return run_report.pending


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _report_lines:
        terminalreporter.section("Figures measured by the tests")
        for line in _report_lines:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def logging_as_before() -> Iterator[None]:
    """Puts logging back after a test that ran a command in-process: `antre ...` configures
    the root logger with a handler on the sys.stderr of that moment, which pytest closes after
    the test. Left in place, every later log line fails with a traceback on stderr (a worker's
    200 'retrying' lines took over 10 s in a loaded run)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in logs.PROCESS_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer("--maxmemory-policy", "noeviction")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's Redis, emptied once per test before any fixture seeds it: a test must not
    see another's jobs (an operator test's JobQueue named like an earlier test's queue scaled up
    for that test's 200 jobs)."""
    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)  # emptied by redis_url
    yield client
    client.close()
