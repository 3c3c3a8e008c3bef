"""Fixtures of the browser tests: a real headless Chromium driven by Playwright, a real
``antre api --dashboard`` subprocess, and a real ``antre worker`` subprocess.

The browser is Debian's ``chromium`` (scripts/test.sh installs it when missing); Playwright's
Python package drives it over CDP (its own browser download is never used). A missing browser
fails the tests, it never skips them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import requests
from antre import Queue
from browser_support import QUEUE, TOKEN, Api
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright
from redis_servers import child_env, free_port, wait_until

HERE = Path(__file__).parent
CHROMIUM = os.environ.get("ANTRE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium per test module. Not per session: the sync Playwright driver keeps an event
    loop running in this thread while it lives, which the asyncio tests of other modules need."""
    assert shutil.which(CHROMIUM) or os.access(CHROMIUM, os.X_OK), (
        f"{CHROMIUM} not found: install Debian's chromium (scripts/test.sh does it as root)")
    with sync_playwright() as playwright:
        # launch() gives every run a fresh temporary user-data-dir of its own.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh profile per test: no cookies, no cache."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    yield context
    context.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # Refused sign-ins and actions answer 401/403 on purpose: those loads are not errors here.
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error"
            and not msg.text.startswith("Failed to load resource") else None)
    yield page
    # A script error or a CSP violation on any page is a failure of that test.
    assert errors == []


@pytest.fixture
def start_api(redis_url: str, redis_client: redis.Redis, tmp_path: Path) -> Iterator[Callable[..., Api]]:
    """Starts ``antre api --dashboard`` for queue ``emails`` (extra flags and env allowed)."""
    started: list[Api] = []

    def start(*flags: str, token: str | None = TOKEN, **env_overrides: str) -> Api:
        port = free_port()
        env = child_env()
        env.pop("ANTRE_API_TOKEN", None)
        if token is not None:
            env["ANTRE_API_TOKEN"] = token
        env.update(env_overrides)
        log_path = tmp_path / f"api-{len(started)}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "antre", "api", "--redis-url", redis_url, "--queue", QUEUE,
                 "--host", "127.0.0.1", "--port", str(port), "--dashboard", *flags],
                env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=tmp_path)
        api = Api(f"http://127.0.0.1:{port}", process, log_path)
        started.append(api)
        wait_until(lambda: requests.get(api.url + "/healthz", timeout=1).ok, timeout_s=20,
                   message=f"antre api on port {port}")
        return api

    yield start
    for api in started:
        api.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            api.process.wait(10)
        if api.process.poll() is None:
            api.process.kill()
            api.process.wait(10)


@pytest.fixture
def api(start_api: Callable[..., Api]) -> Api:
    return start_api()


@pytest.fixture
def start_worker(redis_url: str, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env = child_env()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
        log_file = (tmp_path / f"worker-{len(processes)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "antre", "worker", "--handlers", "dashboard_handlers",
             "--redis-url", redis_url, "--queue", QUEUE, "--concurrency", "8",
             "--reaper-interval", "0.5"],
            env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=tmp_path)
        log_file.close()
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(15)
        if process.poll() is None:
            process.kill()
            process.wait(10)


@pytest.fixture
def queue(redis_client: redis.Redis) -> Queue:
    return Queue(redis_client, QUEUE)


