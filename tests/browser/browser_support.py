"""Helpers of the browser tests (a uniquely named module: `conftest` is ambiguous across the
suite's directories): the API under test, signing in, live numbers, waiting with a deadline."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.sync_api import Locator, Page
from redis_servers import wait_until

TOKEN = "dashboard-test-token"
QUEUE = "emails"


@dataclass
class Api:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def ui(self, path: str = "/") -> str:
        return f"{self.url}/ui{path}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def sign_in(page: Page, api: Api, path: str = "/") -> None:
    page.goto(api.ui(path))
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(api.ui(path))


def live_field(page: Page, field: str, row: str | None = None) -> Locator:
    """The locator of a live number (``data-field``), in a queue's overview row if given."""
    scope = page.locator(f'tr[data-queue="{row}"]') if row else page
    return scope.locator(f'[data-field="{field}"]').first


def eventually(check: Callable[[], Any], timeout_s: float = 20.0, message: str = "condition") -> Any:
    return wait_until(check, timeout_s=timeout_s, interval_s=0.05, message=message)
