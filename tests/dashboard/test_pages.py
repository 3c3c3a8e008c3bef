"""The dashboard's pages over HTTP, in-process, against real Redis.

Covers: the numbers on the overview and a queue page are the depth script's (what ``antre
stats`` and the API's stats return); a job's record.json is what the API's job endpoint returns;
a hand-back shows as its own event in a job's timeline and the queue's counters;
a queue outside the API's scope is a 404 on every page; windows clamp the page number; search by
job id and by idempotency key; a job whose record cannot be parsed still shows its fields; the
security headers; Redis down is a 503 page, not a traceback, and a change Redis refuses says so;
numbers in the URL or a form that are not ASCII digits (a superscript "²") read as absent, and a
form body that is not UTF-8 is a 400 page: neither is a 500.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import redis.asyncio
from aiohttp.test_utils import TestClient, TestServer
from antre import AsyncQueue, Queue, api, settings
from antre.dashboard.state import DashboardSettings
from operations import queue_states
from registered_workers import register_earlier_worker, register_worker

from dashboard.conftest import QUEUES, TOKEN, csrf_of, sign_in


def field(html: str, name: str, queue: str | None = None) -> str:
    if queue is not None:
        html = html.split(f'data-queue="{queue}"', 1)[1]
    found = re.search(rf'data-field="{name}"[^>]*>(.*?)<', html, re.S)
    assert found, name
    return found.group(1).strip()


async def test_numbers_are_the_depth_scripts(ui: TestClient[Any, Any], aredis: Any,
                                             redis_client: Any) -> None:
    queue = Queue(redis_client, "emails")
    queue.enqueue_many([("t", {"i": i}) for i in range(1234)])
    queue.enqueue("t", {}, delay=600)
    await sign_in(ui)
    overview = await (await ui.get("/ui/")).text()
    depth = await AsyncQueue(aredis, "emails").stats()
    assert field(overview, "ready", "emails") == f"{depth.ready:,}" == "1,234"
    assert field(overview, "scheduled", "emails") == "1"
    assert field(overview, "ready", "reports") == "0"
    page = await (await ui.get("/ui/queues/emails")).text()
    assert field(page, "ready") == "1,234" and field(page, "backlog") == "1,234"
    # The API's stats answer with the same numbers.
    stats = await (await ui.get("/v1/queues/emails/stats",
                                headers={"Authorization": f"Bearer {TOKEN}"})).json()
    assert (stats["ready"], stats["scheduled"], stats["backlog"]) == (1234, 1, 1234)


async def test_a_worker_of_an_earlier_version_is_marked(ui: TestClient[Any, Any],
                                                        redis_client: Any) -> None:
    """Beside compact queued jobs it drops what it pops: the worker table says which worker
    is of an earlier version, and the doctor's finding says what to do."""
    queue = Queue(redis_client, "emails")
    register_worker(redis_client, queue.settings, worker_id="w-new")
    queue.enqueue_many([("t", i) for i in range(2)])
    register_earlier_worker(redis_client, queue.settings, worker_id="w-old")
    await sign_in(ui)
    page = await (await ui.get("/ui/queues/emails")).text()
    rows = re.findall(r"<tr>\s*<td><code>(w-[a-z]+)</code>(.*?)</td>", page, re.S)
    assert {worker: "earlier version" in rest for worker, rest in rows} == {
        "w-new": False, "w-old": True}
    assert '<li class="critical" data-code="queued_jobs_with_earlier_workers">' in page
    assert "holding 2 compact queued job(s)" in page


async def test_record_json_is_the_apis_job(ui: TestClient[Any, Any], redis_client: Any) -> None:
    job_id = Queue(redis_client, "emails").enqueue("t", {"to": "ana"}, idempotency_key="k1").job_id
    await sign_in(ui)
    record = await (await ui.get(f"/ui/queues/emails/jobs/{job_id}/record.json")).json()
    from_api = await (await ui.get(f"/v1/queues/emails/jobs/{job_id}",
                                   headers={"Authorization": f"Bearer {TOKEN}"})).json()
    assert record == from_api and record["payload"] == {"to": "ana"}


async def test_a_hand_back_shows_as_its_own_event(ui: TestClient[Any, Any],
                                                  redis_client: Any) -> None:
    """In the job's timeline (its reason not shown as an error: nothing failed) and in the
    queue's counters, apart from a shutdown's release."""
    handed, released = queue_states.handed_back_and_released(Queue(redis_client, "emails"))
    await sign_in(ui)
    for job_id, event, reason in ((handed, "handed_back", "prefetched, handed back unstarted"),
                                  (released, "released", "worker shutting down")):
        html = await (await ui.get(f"/ui/queues/emails/jobs/{job_id}")).text()
        entry = re.search(rf'<li class="ev-{event}">(.*?)</li>', html, re.S)
        assert entry, event
        assert f"<strong>{event.replace('_', ' ')}</strong> · attempt 1" in entry.group(1)
        assert f'<div class="muted">{reason}</div>' in entry.group(1)
    page = await (await ui.get("/ui/queues/emails")).text()
    assert "handed_back 1" in page and "released 1" in page


async def test_scope_windows_and_search(ui: TestClient[Any, Any], redis_client: Any) -> None:
    queue = Queue(redis_client, "emails")
    ids = [r.job_id for r in queue.enqueue_many([("t", {"i": i}) for i in range(120)])]
    done = queue.enqueue("t", {}, idempotency_key="welcome-ana").job_id
    await sign_in(ui)
    for path in ("/ui/queues/other", "/ui/queues/other/dead", f"/ui/queues/other/jobs/{ids[0]}",
                 "/ui/queues/bad%20name"):
        answer = await ui.get(path)
        assert answer.status == 404, path
    first = await (await ui.get("/ui/queues/emails?state=ready&page=1")).text()
    assert ids[0] in first and ids[60] not in first  # head of the line: the oldest first
    last = await (await ui.get("/ui/queues/emails?state=ready&page=999")).text()
    assert "page 3 of 3" in last and done in last
    found = await ui.get("/ui/queues/emails/search?q=welcome-ana", allow_redirects=False)
    assert found.headers["Location"] == f"/ui/queues/emails/jobs/{done}"
    found = await ui.get(f"/ui/queues/emails/search?q={ids[5]}", allow_redirects=False)
    assert found.headers["Location"] == f"/ui/queues/emails/jobs/{ids[5]}"
    missing = await ui.get("/ui/queues/emails/search?q=nothing-like-it")
    assert "No job has that id or idempotency key" in await missing.text()


async def test_unreadable_record_and_headers(ui: TestClient[Any, Any], redis_client: Any) -> None:
    queue = Queue(redis_client, "emails")
    redis_client.hset(queue.keys.job("broken-1"), mapping={"id": "broken-1", "status": "queued",
                                                           "payload": "{not json"})
    await sign_in(ui)
    answer = await ui.get("/ui/queues/emails/jobs/broken-1")
    html = await answer.text()
    assert answer.status == 200 and "cannot be read (undecodable payload" in html
    assert "{not json" in html
    assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
    assert answer.headers["X-Frame-Options"] == "DENY"
    assert answer.headers["Cache-Control"] == "no-store"


async def test_a_record_that_is_not_valid_text_is_shown_escaped(ui: TestClient[Any, Any],
                                                                redis_client: Any) -> None:
    """A foreign producer's record with a lone surrogate escape (valid JSON, not valid text):
    every page shows it escaped, none answers 500."""
    queue = Queue(redis_client, "emails")
    redis_client.hset(queue.keys.job("odd-1"), mapping={
        "id": "odd-1", "type": "t", "status": "queued", "attempt": "0", "max_attempts": "5",
        "created_at": "1", "updated_at": "1", "payload": '{"note":"\\ud800"}'})
    await sign_in(ui)
    page = await ui.get("/ui/queues/emails/jobs/odd-1")
    html = await page.text()
    assert page.status == 200 and "\\ud800" in html, html[:500]
    record = await ui.get("/ui/queues/emails/jobs/odd-1/record.json")
    assert record.status == 200
    assert (await record.json())["payload"] == {"note": "\ud800"}


async def test_redis_down_is_a_503_page() -> None:
    from antre import api, settings
    from antre.dashboard.state import DashboardSettings
    from redis_servers import running_redis

    with running_redis() as server:
        client = redis.asyncio.Redis.from_url(server.url, decode_responses=True)
        app = api.create_app(client, queue_template=settings.QueueSettings(),
                             api_settings=api.ApiSettings(queues=("emails",), token=TOKEN),
                             dashboard=DashboardSettings())
        ui: TestClient[Any, Any] = TestClient(TestServer(app))
        await ui.start_server()
        try:
            await sign_in(ui)
            server.kill()
            answer = await ui.get("/ui/queues/emails")
            assert answer.status == 503 and "Redis is unavailable" in await answer.text()
            assert answer.headers["Retry-After"] == "2"
        finally:
            await ui.close()
            await client.aclose()


async def test_a_change_redis_refuses_is_named_so_not_unreachable(
        ui: TestClient[Any, Any], redis_client: Any) -> None:
    """Redis full (noeviction) refuses a cancel: the page says Redis refused it, with Redis's
    reason, not that Redis cannot be reached; the job is left as it was."""
    job_id = Queue(redis_client, "emails").enqueue("t", {}).job_id
    await sign_in(ui)
    csrf = csrf_of(await (await ui.get("/ui/")).text())
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", 1)
    try:
        answer = await ui.post("/ui/queues/emails/actions", data={
            "csrf": csrf, "action": "cancel", "ids": job_id, "confirmed": "yes"})
    finally:
        redis_client.config_set("maxmemory", 0)
    page = await answer.text()
    assert answer.status == 503 and "Redis refused the change" in page, page[:800]
    assert "maxmemory" in page and "cannot be reached" not in page
    assert Queue(redis_client, "emails").get(job_id).status == "queued"


def test_settings_from_flags_and_env_and_the_docs_table(monkeypatch: Any) -> None:
    from pathlib import Path

    import pytest
    from antre import cli, errors, fields
    from antre.commands import api as api_command
    from antre.dashboard.state import DashboardSettings

    args = cli.build_parser().parse_args(["api", "--dashboard", "--dashboard-interval", "0.5"])
    monkeypatch.setenv("ANTRE_DASHBOARD_SESSION_TTL", "600")
    built = fields.build(DashboardSettings, fields.values_from_args(DashboardSettings, args,
                                                                    {"ANTRE_DASHBOARD_SESSION_TTL": "600"}))
    assert (built.live_interval_s, built.session_ttl_s) == (0.5, 600)
    assert api_command.flag_from_env("ANTRE_DASHBOARD", None) is False
    monkeypatch.setenv("ANTRE_DASHBOARD", "yes please")
    with pytest.raises(errors.InvalidArgument, match="ANTRE_DASHBOARD: got 'yes please'"):
        api_command.flag_from_env("ANTRE_DASHBOARD", None)
    with pytest.raises(errors.InvalidArgument,
                       match=r"live_interval_s: got 0.1; must be a number from 0.2 to 60"):
        DashboardSettings(live_interval_s=0.1)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "dashboard.md").read_text()
    assert [row for row in fields.markdown_rows(DashboardSettings) if row not in docs] == []


async def test_tabs_opening_at_once_stay_within_the_stream_limit(aredis: Any) -> None:
    """The limit holds for tabs that open together: the check and the subscription happen with
    no await between them. (A review suspected they did not: the tab subscribed only after
    sending its headers. aiohttp's prepare() does not yield on a fresh connection, so that never
    showed, but any await there that yields would let every tab opening at once through.)"""
    app = api.create_app(aredis, queue_template=settings.QueueSettings(),
                         api_settings=api.ApiSettings(queues=QUEUES, token=TOKEN),
                         dashboard=DashboardSettings(live_interval_s=60, max_streams=2))
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        await sign_in(client)
        answers = await asyncio.gather(*[client.get("/ui/live/overview") for _ in range(6)])
        assert sorted(answer.status for answer in answers) == [200, 200, 503, 503, 503, 503]
        for answer in answers:
            answer.close()
    finally:
        await client.close()


async def test_numbers_in_the_url_that_are_not_ascii_digits_are_no_500(
        ui: TestClient[Any, Any], redis_client: Any) -> None:
    """'²' is a digit to str.isdigit but not to int(): a page number, a scan size or a notice's
    count spelled so reads as absent (the default), never as an internal error with a
    traceback in the log."""
    Queue(redis_client, "emails").enqueue("t", {})
    await sign_in(ui)
    for path in ("/ui/queues/emails?state=ready&page=²", "/ui/queues/emails/dead?page=²",
                 "/ui/queues/emails/dead?scan=²", "/ui/?done=replayed&n=²&of=³",
                 "/ui/queues/emails?page=٣"):
        answer = await ui.get(path)
        assert answer.status == 200, (path, await answer.text())
    notice = await (await ui.get("/ui/?done=replayed&n=²&of=1")).text()
    assert "Replayed ? of 1 job(s)" in notice
    csrf = csrf_of(notice)
    action = await ui.post("/ui/queues/emails/actions", data={
        "csrf": csrf, "action": "replay", "group": "0" * 20, "scan": "²"})
    assert action.status == 400 and "Select at least one job" in await action.text()


async def test_a_form_body_that_is_not_utf8_is_a_400_page(ui: TestClient[Any, Any]) -> None:
    """Anyone may post to the sign-in form, and a signed-in page's actions take forms too: a
    body whose bytes are not UTF-8 is a 400 page, not a 500 with a traceback logged."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    answer = await ui.post("/ui/login", data=b"token=\xff\xfe&csrf=x", headers=form)
    assert answer.status == 400, await answer.text()
    assert "not valid UTF-8" in await answer.text()
    await sign_in(ui)
    answer = await ui.post("/ui/queues/emails/actions", data=b"csrf=\xff", headers=form)
    assert answer.status == 400, await answer.text()
    assert "not valid UTF-8" in await answer.text()


async def test_a_live_stream_ends_when_its_session_does(ui: TestClient[Any, Any],
                                                        redis_client: Any) -> None:
    """A sign-in lasts its session TTL, live tabs included: a stream opened with a session
    ends when that session expires (the browser's reconnect then gets the 401 a page without a
    session gets), rather than streaming the queues for as long as the tab stays open."""
    from antre.dashboard import sessions

    Queue(redis_client, "emails").enqueue("t", {})
    signer = sessions.SessionSigner(sessions.signing_key(TOKEN), ttl_s=2)
    _session, cookie = signer.issue()
    headers = {"Cookie": f"{sessions.COOKIE_NAME}={cookie}"}
    stream = await ui.get("/ui/live/queues/emails", headers=headers)
    assert stream.status == 200
    try:
        # Every frame is read until the server ends the stream; 2 s of session, 10 s allowed.
        await asyncio.wait_for(stream.content.read(), timeout=10)
    except TimeoutError:
        raise AssertionError("the stream outlived its session by more than 8 s") from None
    finally:
        stream.close()
    again = await ui.get("/ui/live/queues/emails", headers=headers)
    assert again.status == 401
