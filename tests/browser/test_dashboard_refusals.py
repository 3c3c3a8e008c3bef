"""What the dashboard refuses, against a real ``antre api --dashboard``: actions without the
session cookie, without the CSRF token, with another session's token or from another origin;
live streams without a session; everything that changes a job in read-only mode; repeated
wrong tokens (throttled). Each refusal leaves the job as it was.
"""

from __future__ import annotations

import re
from typing import Any

import redis
import requests
from antre import Queue
from browser_support import QUEUE, TOKEN, Api, eventually, sign_in
from invariants import read_record
from playwright.sync_api import BrowserContext, Page, expect


def _csrf(page: Page) -> str:
    return page.locator('input[name="csrf"]').first.get_attribute("value") or ""


def _cancel_form(job_id: str, csrf: str | None) -> dict[str, Any]:
    form = {"action": "cancel", "ids": job_id, "confirmed": "yes",
            "back": f"/ui/queues/{QUEUE}/jobs/{job_id}"}
    if csrf is not None:
        form["csrf"] = csrf
    return form


def test_actions_need_the_cookie_and_the_csrf_token(page: Page, context: BrowserContext, api: Api,
                                                    queue: Queue, redis_client: redis.Redis) -> None:
    job_id = queue.enqueue("send_email", {}).job_id
    action_url = api.ui(f"/queues/{QUEUE}/actions")
    sign_in(page, api, f"/queues/{QUEUE}/jobs/{job_id}")
    csrf = _csrf(page)
    assert csrf

    # No session cookie (another client): 401, nothing changes, even with a CSRF token.
    refused = requests.post(action_url, data=_cancel_form(job_id, csrf), allow_redirects=False,
                            timeout=10)
    assert refused.status_code == 401 and "nothing was changed" in refused.text
    # The browser's session, but no token, a wrong one, or a foreign Origin: 403.
    for form, headers in ((_cancel_form(job_id, None), {}),
                          (_cancel_form(job_id, csrf[:-2] + "xx"), {}),
                          (_cancel_form(job_id, csrf), {"Origin": "http://evil.example"})):
        answer = context.request.post(action_url, form=form, headers=headers, max_redirects=0)
        assert answer.status == 403, (form, headers)
    assert read_record(redis_client, queue, job_id).get("status") == "queued"

    # A token minted for another session does not work in this one.
    other = requests.Session()
    login_page = other.get(api.ui("/login"), timeout=10)
    login_csrf = re.search(r'name="csrf" value="([^"]+)"', login_page.text)
    assert login_csrf
    other.post(api.ui("/login"), data={"csrf": login_csrf.group(1), "token": TOKEN,
                                       "next": "/ui/"}, timeout=10)
    other_csrf = re.search(r'name="csrf" value="([^"]+)"', other.get(api.ui("/"), timeout=10).text)
    assert other_csrf and other_csrf.group(1) != csrf
    answer = context.request.post(action_url, form=_cancel_form(job_id, other_csrf.group(1)),
                                  max_redirects=0)
    assert answer.status == 403
    assert read_record(redis_client, queue, job_id).get("status") == "queued"

    # With both, the same request works (303 to the job page with the notice).
    answer = context.request.post(action_url, form=_cancel_form(job_id, csrf), max_redirects=0)
    assert answer.status == 303
    assert read_record(redis_client, queue, job_id).get("status") == "cancelled"


def test_pages_and_streams_need_a_session(api: Api) -> None:
    page = requests.get(api.ui(f"/queues/{QUEUE}"), allow_redirects=False, timeout=10)
    assert page.status_code == 303 and page.headers["Location"].startswith("/ui/login?next=")
    stream = requests.get(api.ui("/live/overview"), timeout=10)
    assert stream.status_code == 401
    forged = requests.get(api.ui("/"), cookies={"antre_session": "v1.9999999999.abc.forged"},
                          allow_redirects=False, timeout=10)
    assert forged.status_code == 303
    # The API's own paths keep their bearer token.
    assert requests.get(f"{api.url}/v1/queues/{QUEUE}/stats", timeout=10).status_code == 401


def test_read_only_mode(page: Page, context: BrowserContext, start_api: Any, queue: Queue,
                        redis_client: redis.Redis, start_worker: Any, tmp_path: Any) -> None:
    api = start_api("--dashboard-read-only")
    dead_ids = [r.job_id for r in queue.enqueue_many(
        [("charge", {"fixed": str(tmp_path / "never")}) for _ in range(2)])]
    start_worker()
    eventually(lambda: queue.stats().dead == 2, message="two dead letters")
    sign_in(page, api, f"/queues/{QUEUE}/dead")
    expect(page.locator("header .badge")).to_have_text("read-only")
    expect(page.locator("table.groups")).to_contain_text("upstream refused the charge")
    expect(page.get_by_role("button", name="Replay 2")).to_have_count(0)
    expect(page.get_by_role("button", name="Purge selected")).to_have_count(0)
    page.goto(api.ui(f"/queues/{QUEUE}/jobs/{dead_ids[0]}"))
    expect(page.get_by_role("button", name="Replay")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    # A hand-made request with a valid session and token is refused too.
    answer = context.request.post(api.ui(f"/queues/{QUEUE}/actions"), max_redirects=0, form={
        "csrf": _csrf(page), "action": "replay", "ids": dead_ids[0], "confirmed": "yes"})
    assert answer.status == 403 and "read-only" in answer.text()
    assert read_record(redis_client, queue, dead_ids[0]).get("status") == "dead"


def test_wrong_tokens_are_throttled(api: Api) -> None:
    session = requests.Session()
    csrf = re.search(r'name="csrf" value="([^"]+)"', session.get(api.ui("/login"), timeout=10).text)
    assert csrf
    statuses = [session.post(api.ui("/login"), data={"csrf": csrf.group(1), "token": f"guess-{i}",
                                                     "next": "/ui/"}, timeout=10).status_code
                for i in range(11)]
    assert statuses == [401] * 10 + [429]
    # Even the right token waits until the window passes.
    late = session.post(api.ui("/login"), data={"csrf": csrf.group(1), "token": TOKEN,
                                                "next": "/ui/"}, allow_redirects=False, timeout=10)
    assert late.status_code == 429 and int(late.headers["Retry-After"]) > 0


def _sign_in_answers(api: Api, tokens: list[str], forwarded_for: str) -> list[int]:
    session = requests.Session()
    csrf = re.search(r'name="csrf" value="([^"]+)"', session.get(api.ui("/login"), timeout=10).text)
    assert csrf
    return [session.post(api.ui("/login"), data={"csrf": csrf.group(1), "token": token,
                                                 "next": "/ui/"},
                         headers={"X-Forwarded-For": forwarded_for}, allow_redirects=False,
                         timeout=10).status_code for token in tokens]


def test_behind_a_trusted_proxy_wrong_tokens_count_per_client(start_api: Any) -> None:
    """Behind an Ingress every request comes from the proxy: one visitor's wrong tokens must not
    lock every operator out. Named as a trusted proxy, the proxy's X-Forwarded-For says who is
    who; a client's own entries (left of the proxy's) change nothing."""
    api = start_api("--dashboard-trusted-proxies", "127.0.0.0/8")
    guesses = [f"guess-{i}" for i in range(10)]
    assert _sign_in_answers(api, [*guesses, TOKEN], "203.0.113.7") == [401] * 10 + [429]
    assert _sign_in_answers(api, [TOKEN], "1.2.3.4, 203.0.113.7") == [429]  # invented on the left
    assert _sign_in_answers(api, [TOKEN], "198.51.100.2") == [303]  # another operator


def test_from_anyone_else_the_header_is_ignored(api: Api) -> None:
    """Without trusted proxies an X-Forwarded-For is the client's own word: a new one per
    request must not buy new guesses."""
    assert _sign_in_answers(api, [f"guess-{i}" for i in range(10)], "203.0.113.7") == [401] * 10
    assert _sign_in_answers(api, [TOKEN], "198.51.100.2") == [429]


def test_without_a_token_no_sign_in_but_still_csrf(page: Page, context: BrowserContext,
                                                   start_api: Any, queue: Queue,
                                                   redis_client: redis.Redis) -> None:
    # `antre api --no-auth`: the dashboard opens at once, and an action still needs the
    # session's CSRF token (a page on another site cannot cancel a job).
    api = start_api("--no-auth", token=None)
    job_id = queue.enqueue("send_email", {}).job_id
    page.goto(api.ui(f"/queues/{QUEUE}/jobs/{job_id}"))
    expect(page.get_by_role("heading", name=f"Job {job_id}")).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_have_count(0)
    action_url = api.ui(f"/queues/{QUEUE}/actions")
    answer = context.request.post(action_url, form=_cancel_form(job_id, None), max_redirects=0)
    assert answer.status == 403
    assert requests.post(action_url, data=_cancel_form(job_id, "x"), timeout=10).status_code == 401
    assert read_record(redis_client, queue, job_id).get("status") == "queued"
    page.get_by_role("button", name="Cancel").click()
    page.get_by_role("button", name="Cancel the job").click()
    expect(page.locator("h1 .status")).to_have_text("cancelled")
