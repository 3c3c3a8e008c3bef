"""The screenshot in README, taken by the suite's browser from a live queue.

A worker drains slow jobs (some on locked resources) while others dead-letter with two
different errors; once the charts hold a few samples, the queue page is captured. The
test checks what the picture must show, so a broken page cannot be committed as the README's
picture. It writes docs/images/dashboard.png only when ANTRE_UPDATE_SCREENSHOT=1
(a run of the suite leaves the checkout as it was):

    ANTRE_UPDATE_SCREENSHOT=1 bash scripts/test.sh tests/browser/test_readme_screenshot.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from antre import Queue
from browser_support import QUEUE, Api, eventually, live_field, sign_in
from playwright.sync_api import Page, expect

README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "dashboard.png"


def test_readme_screenshot(page: Page, api: Api, queue: Queue, start_worker: Any,
                           tmp_path: Path) -> None:
    never = str(tmp_path / "never-fixed")
    queue.enqueue_many([("charge", {"fixed": never, "card": i}) for i in range(14)])
    queue.enqueue_many([{"type": "send_email", "payload": {"to": f"user{i}@example.com",
                                                           "sleep_s": 0.25},
                         "resource_key": f"account-{i % 3}" if i < 6 else None}
                        for i in range(1500)])
    queue.enqueue("charge", {"fixed": never}, max_attempts=1)
    start_worker()
    eventually(lambda: queue.stats().dead >= 14, message="the failing charges dead-lettered")
    page.set_viewport_size({"width": 1280, "height": 1000})
    sign_in(page, api, f"/queues/{QUEUE}")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    # Let the sparklines gather samples while the worker drains.
    for _ in range(5):
        page.wait_for_timeout(1000)
    expect(live_field(page, "workers")).to_have_text("1")
    expect(page.locator("#health")).to_contain_text("dead_letter")
    expect(page.locator("#workers-h")).to_contain_text("(1)")
    assert float(live_field(page, "done-rate").inner_text()) > 0
    update = os.environ.get("ANTRE_UPDATE_SCREENSHOT") == "1"
    screenshot = README_SCREENSHOT if update else tmp_path / "dashboard.png"
    page.screenshot(path=str(screenshot))
    assert screenshot.stat().st_size > 20_000
