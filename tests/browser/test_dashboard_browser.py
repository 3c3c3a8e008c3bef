"""The dashboard in a real headless Chromium, against a real ``antre api --dashboard`` and a
real ``antre worker``.

Covers: signing in (a wrong token refused, the session cookie HttpOnly and SameSite=Strict,
the token itself never stored); a queue's numbers changing live, without a reload, as jobs are
enqueued and worked; a job's page (payload, lifecycle); replaying a dead-letter group with a
confirmation that says how many, then seeing the jobs done; cancelling a queued job; a link
from another site landing signed in; keyboard navigation and contrast.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from antre import Queue
from browser_support import QUEUE, TOKEN, Api, eventually, live_field, sign_in
from invariants import read_record
from playwright.sync_api import BrowserContext, Page, expect
from redis_servers import free_port


def test_sign_in(page: Page, context: BrowserContext, api: Api) -> None:
    page.goto(api.ui("/"))
    expect(page).to_have_url(api.ui("/login?next=/ui/"))
    page.get_by_label("API token").fill("not-the-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("That is not this API's token.")
    assert not any(c["name"] == "antre_session" for c in context.cookies())

    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(api.ui("/"))
    expect(page.get_by_role("heading", name="Queues")).to_be_visible()
    [session] = [c for c in context.cookies() if c["name"] == "antre_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and session["path"] == "/ui"
    assert TOKEN not in session["value"]
    # Signing out drops the cookie; the next page asks again.
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API token")).to_be_visible()
    page.goto(api.ui(f"/queues/{QUEUE}"))
    expect(page.get_by_label("API token")).to_be_visible()


def test_numbers_change_live_as_jobs_are_enqueued_and_worked(
        page: Page, api: Api, queue: Queue, start_worker: Any) -> None:
    sign_in(page, api)
    ready = live_field(page, "ready", row=QUEUE)
    expect(ready).to_have_text("0")
    queue.enqueue_many([("send_email", {"to": f"user{i}@example.com", "sleep_s": 0.05})
                        for i in range(40)])
    # No reload: the live stream brings the new numbers within a tick or two.
    expect(ready).to_have_text("40", timeout=10_000)
    expect(live_field(page, "workers", row=QUEUE)).to_have_text("0")
    start_worker()
    expect(live_field(page, "workers", row=QUEUE)).to_have_text("1", timeout=15_000)
    expect(ready).to_have_text("0", timeout=20_000)
    # Throughput came from the done counter between two samples while the worker drained.
    expect(page.locator('#live-status')).to_have_attribute("data-state", "live")
    assert page.url == api.ui("/")  # never reloaded


def test_queue_page_job_page_and_timeline(page: Page, api: Api, queue: Queue,
                                          start_worker: Any) -> None:
    job_id = queue.enqueue("send_email", {"to": "ana@example.com", "template": "welcome"},
                           idempotency_key="welcome-ana").job_id
    sign_in(page, api, f"/queues/{QUEUE}")
    expect(page.locator("#findings-h")).to_be_visible()
    expect(page.get_by_text("no_workers")).to_be_visible()  # the doctor's finding, live
    page.get_by_role("link", name=job_id).click()
    expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()
    expect(page.locator("pre.payload")).to_contain_text('"template": "welcome"')
    expect(page.locator("ol.timeline")).to_contain_text("enqueued")
    # Search by idempotency key leads to the same job.
    page.goto(api.ui(f"/queues/{QUEUE}"))
    page.get_by_label("Job id or idempotency key").fill("welcome-ana")
    page.get_by_role("button", name="Find").click()
    expect(page).to_have_url(api.ui(f"/queues/{QUEUE}/jobs/{job_id}"))
    start_worker()

    def acked() -> bool:
        page.reload()
        return "acked" in page.locator("ol.timeline").inner_text()

    eventually(acked, message="the acked event on the job page")
    expect(page.locator("h1 .status")).to_have_text("done")
    expect(page.locator("ol.timeline")).to_contain_text("claimed")


def test_a_job_page_follows_its_job_live(page: Page, api: Api, queue: Queue, start_worker: Any,
                                        redis_client: redis.Redis, tmp_path: Path) -> None:
    """The job's state, attributes, timeline and actions change without a reload; an action
    that appears live works (its form gets this session's CSRF token from the page)."""
    fixed = tmp_path / "fixed"
    job_id = queue.enqueue("charge", {"fixed": str(fixed)}, max_attempts=1).job_id
    sign_in(page, api, f"/queues/{QUEUE}/jobs/{job_id}")
    expect(page.locator("h1 .status")).to_have_text("queued")
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    start_worker()
    expect(page.locator("h1 .status")).to_have_text("dead", timeout=15_000)
    expect(page.locator("ol.timeline")).to_contain_text("upstream refused the charge")
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    assert page.evaluate("window.loadedOnce === true"), "the page was reloaded"
    fixed.write_text("deployed")
    page.get_by_role("button", name="Replay").click()
    page.get_by_role("button", name="Replay 1").click()
    expect(page.get_by_role("status")).to_contain_text("Replayed 1 of 1 job(s)")
    eventually(lambda: queue.get(job_id).status == "done",
               message="the replayed job done")
    page.goto(api.ui(f"/queues/{QUEUE}/jobs/{job_id}"))
    expect(page.locator("h1 .status")).to_have_text("done")
    page.get_by_role("link", name="The whole record as JSON").click()
    assert f'"id": "{job_id}"' in page.locator("body").inner_text()


def test_replay_a_dead_letter_group(page: Page, api: Api, queue: Queue, start_worker: Any,
                                    redis_client: redis.Redis, tmp_path: Path) -> None:
    fixed = tmp_path / "fixed"
    ids = [r.job_id for r in queue.enqueue_many(
        [("charge", {"fixed": str(fixed), "n": i}) for i in range(6)])]
    queue.enqueue("send_email", {})  # a job that succeeds: not in any group
    start_worker()
    eventually(lambda: queue.stats().dead == 6, message="six dead letters")
    sign_in(page, api, f"/queues/{QUEUE}/dead")
    group = page.locator("table.groups tbody tr").first
    expect(group).to_contain_text("upstream refused the charge")
    fixed.write_text("deployed")  # the fix is out: replay the group
    group.get_by_role("button", name="Replay 6").click()
    expect(page.get_by_role("heading", name="Replay 6 dead job(s) of queue emails?")).to_be_visible()
    page.get_by_role("button", name="Replay 6").click()
    expect(page.get_by_role("status")).to_have_text(
        "Replayed 6 of 6 job(s): they are back in the ready list.")
    eventually(lambda: all(read_record(redis_client, queue, i).get("status") == "done" for i in ids),
               message="the replayed jobs done")
    expect(live_field(page, "dead")).to_have_text("0", timeout=10_000)


def test_purge_selected_dead_letters(page: Page, api: Api, queue: Queue, start_worker: Any,
                                     redis_client: redis.Redis, tmp_path: Path) -> None:
    ids = [r.job_id for r in queue.enqueue_many(
        [("charge", {"fixed": str(tmp_path / "never")}) for _ in range(3)])]
    start_worker()
    eventually(lambda: queue.stats().dead == 3, message="three dead letters")
    sign_in(page, api, f"/queues/{QUEUE}/dead")
    page.get_by_label(f"select {ids[0]}").check()
    page.get_by_label(f"select {ids[2]}").check()
    page.get_by_role("button", name="Purge selected").click()
    expect(page.get_by_role("heading", name="Delete 2 dead job(s) of queue emails for good?")) \
        .to_be_visible()
    page.get_by_role("button", name="Delete 2").click()
    expect(page.get_by_role("status")).to_have_text("Purged 2 of 2 job(s).")
    assert redis_client.exists(queue.keys.job(ids[0]), queue.keys.job(ids[2])) == 0
    assert read_record(redis_client, queue, ids[1]).get("status") == "dead"


def test_cancel_a_queued_job(page: Page, api: Api, queue: Queue,
                             redis_client: redis.Redis) -> None:
    job_id = queue.enqueue("send_email", {}).job_id
    sign_in(page, api, f"/queues/{QUEUE}/jobs/{job_id}")
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("heading", name=f"Cancel job {job_id} of queue emails?")).to_be_visible()
    assert read_record(redis_client, queue, job_id).get("status") == "queued"  # not yet: confirm
    page.get_by_role("button", name="Cancel the job").click()
    expect(page.get_by_role("status")).to_have_text("Cancelled: the job was queued and will not run.")
    expect(page.locator("h1 .status")).to_have_text("cancelled")
    assert read_record(redis_client, queue, job_id).get("status") == "cancelled"


@pytest.fixture
def other_site(api: Api) -> Iterator[str]:
    """A page on another site (localhost, not 127.0.0.1) that links to a dashboard page."""
    link = api.ui(f"/queues/{QUEUE}")
    body = f'<a id="to-dashboard" href="{link}">the emails queue</a>'.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    port = free_port()
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://localhost:{port}/"
    server.shutdown()


def test_a_link_from_another_site_lands_signed_in(page: Page, api: Api, other_site: str) -> None:
    sign_in(page, api)
    page.goto(other_site)
    page.locator("#to-dashboard").click()
    # The SameSite=Strict cookie is not sent on the cross-site click; the sign-in page reloads
    # itself once from our origin and lands on the queue, signed in.
    expect(page).to_have_url(api.ui(f"/queues/{QUEUE}"))
    expect(page.get_by_role("heading", name=f"Queue {QUEUE}")).to_be_visible()


def _contrast(page: Page, selector: str) -> float:
    return float(page.eval_on_selector(selector, """element => {
        const rgb = text => text.match(/[\\d.]+/g).slice(0, 3).map(Number);
        const lum = ([r, g, b]) => {
            const c = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
            return 0.2126 * c(r) + 0.7152 * c(g) + 0.0722 * c(b);
        };
        let node = element, background = null;
        while (node && !background) {
            const bg = getComputedStyle(node).backgroundColor;
            if (bg && !bg.startsWith("rgba(0, 0, 0, 0)") && bg !== "transparent") background = bg;
            node = node.parentElement;
        }
        const fg = getComputedStyle(element).color;
        const [a, b] = [lum(rgb(fg)), lum(rgb(background || "rgb(255,255,255)"))];
        return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    }"""))


def test_keyboard_navigation_and_contrast(page: Page, api: Api, queue: Queue) -> None:
    queue.enqueue("send_email", {})
    sign_in(page, api)
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="antre")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("header nav").get_by_role("link", name=QUEUE)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(api.ui(f"/queues/{QUEUE}"))
    for selector in ("h1", "p.muted", "table.jobs td a", "nav.tabs a", ".badge.critical",
                     "footer"):
        assert _contrast(page, selector) >= 4.5, selector
