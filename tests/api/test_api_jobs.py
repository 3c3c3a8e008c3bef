"""Enqueue and read jobs over HTTP.

Covers: 202 queued / scheduled with Location, the idempotency key returning the existing job
with 200, job reads with status, attempt, last_error and history (a hand-back under its own
event, apart from a shutdown's release, in the history and the counters), 404 for unknown jobs,
stats, the dead-letter list with paging and replay by ids or all (past dead letters whose record
is gone), concurrent enqueues sharing script calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

from antre import JobStatus, Queue
from operations import queue_states
from redis_servers import script_calls


async def test_enqueue_answers_202_and_the_job_exists(client: Any, redis_client: Any) -> None:
    response = await client.post("/v1/queues/emails/jobs",
                                 json={"type": "send_email", "payload": {"to": "a@b.c"}})
    assert response.status == 202
    body = await response.json()
    assert body == {"job_id": body["job_id"], "status": "queued", "created": True}
    assert response.headers["Location"] == f"/v1/queues/emails/jobs/{body['job_id']}"
    info = Queue(redis_client, "emails").get(body["job_id"])
    assert (info.type, info.payload, info.status) == ("send_email", {"to": "a@b.c"},
                                                       JobStatus.QUEUED)


async def test_enqueue_with_delay_is_scheduled(client: Any, redis_client: Any) -> None:
    response = await client.post("/v1/queues/q/jobs", json={
        "type": "t", "delay_seconds": 60, "max_attempts": 2, "resource_key": "acct-1"})
    body = await response.json()
    assert (response.status, body["status"]) == (202, "scheduled")
    info = Queue(redis_client, "q").get(body["job_id"])
    assert (info.status, info.max_attempts, info.resource_key) == (JobStatus.SCHEDULED, 2, "acct-1")


async def test_live_idempotency_key_returns_the_existing_job_with_200(client: Any) -> None:
    job = {"type": "charge", "payload": {"amount": 5}, "idempotency_key": "order-42"}
    first = await client.post("/v1/queues/q/jobs", json=job)
    second = await client.post("/v1/queues/q/jobs", json=job)
    assert (first.status, second.status) == (202, 200)
    created, existing = await first.json(), await second.json()
    assert existing["job_id"] == created["job_id"]
    assert existing["created"] is False
    assert existing["status"] == "queued"
    assert existing["job"]["payload"] == {"amount": 5}


async def test_get_job_shows_status_attempt_error_and_history(client: Any, redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    [job_id] = queue_states.dead_letters(queue, [("ValueError: bad address", 1)])
    response = await client.get(f"/v1/queues/q/jobs/{job_id}")
    assert response.status == 200
    body = await response.json()
    assert (body["status"], body["attempt"], body["last_error"]) == (
        "dead", 1, "ValueError: bad address")
    assert [event["event"] for event in body["history"]] == ["enqueued", "claimed", "dead"]


async def test_a_hand_back_is_its_own_event_in_the_history_and_the_counters(
        client: Any, redis_client: Any) -> None:
    handed, released = queue_states.handed_back_and_released(Queue(redis_client, "q"))
    for job_id, event in ((handed, "handed_back"), (released, "released")):
        body = await (await client.get(f"/v1/queues/q/jobs/{job_id}")).json()
        assert [(e["event"], e["attempt"]) for e in body["history"]] == [
            ("enqueued", 0), ("claimed", 1), (event, 1)]
    body = await (await client.get("/v1/queues/q/stats")).json()
    assert (body["counters"]["handed_back"], body["counters"]["released"]) == (1, 1)


async def test_unknown_job_is_404(client: Any) -> None:
    # 100 letters of two bytes each: within the path's 128 characters, over an id's 128 bytes.
    for job_id in ("0123456789abcdef0123456789a", "no%20such", "%C3%A9" * 100):
        response = await client.get(f"/v1/queues/q/jobs/{job_id}")
        assert response.status == 404, job_id
        assert (await response.json())["error"] == "not_found"


async def test_stats(client: Any, redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    queue.enqueue_many([("t", i) for i in range(3)])
    queue.enqueue("t", delay=60)
    body = await (await client.get("/v1/queues/q/stats")).json()
    assert {k: body[k] for k in ("queue", "ready", "scheduled", "due", "dead", "backlog")} == {
        "queue": "q", "ready": 3, "scheduled": 1, "due": 0, "dead": 0, "backlog": 3}
    assert body["counters"]["enqueued"] == 4


async def test_dead_list_pages_newest_first(client: Any, redis_client: Any) -> None:
    ids = queue_states.dead_letters(Queue(redis_client, "q"), [("E1", 3), ("E2", 2)])
    page = await (await client.get("/v1/queues/q/dead?limit=2&offset=1")).json()
    assert (page["total"], page["limit"], page["offset"]) == (5, 2, 1)
    assert [job["id"] for job in page["jobs"]] == list(reversed(ids))[1:3]


async def test_replay_by_ids_and_all(client: Any, redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    ids = queue_states.dead_letters(queue, [("E", 4)])
    # Unknown ids are skipped, and so are ids no job can have (a 500 once the client checked
    # ids; found in a second read).
    response = await client.post("/v1/queues/q/dead/replay",
                                 json={"ids": [ids[0], "nope", "x:y", "a b", "é" * 100]})
    assert (response.status, (await response.json())["replayed"]) == (200, [ids[0]])
    response = await client.post("/v1/queues/q/dead/replay", json={"ids": ["x:y"]})
    assert (response.status, (await response.json())["replayed"]) == (200, [])
    response = await client.post("/v1/queues/q/dead/replay", json={"all": True, "limit": 2})
    assert (await response.json())["count"] == 2
    assert queue.stats().dead == 1
    assert queue.get(ids[0]).status == JobStatus.QUEUED


async def test_replay_all_goes_past_dead_letters_whose_record_is_gone(client: Any,
                                                                    redis_client: Any) -> None:
    """Before: a record deleted among the 100 oldest made the first script call replay 99, and
    the replay ended there: 150 of the 250 dead jobs asked for stayed dead."""
    queue = Queue(redis_client, "q")
    queue_states.dead_letters(queue, [("E", 200), ("F", 50)])
    dead = redis_client.zrange(queue.keys.dead, 0, -1)
    redis_client.delete(queue.keys.job(dead[7]))
    response = await client.post("/v1/queues/q/dead/replay", json={"all": True, "limit": 1000})
    body = await response.json()
    assert (response.status, body["count"]) == (200, 249)
    assert body["replayed"] == dead[:7] + dead[8:]
    assert queue.stats().dead == 0


async def test_delay_under_a_millisecond_is_queued_not_scheduled(client: Any,
                                                                 redis_client: Any) -> None:
    # The protocol counts whole milliseconds, so the job is ready at once: say so.
    response = await client.post("/v1/queues/q/jobs", json={"type": "t", "delay_seconds": 0.0004})
    body = await response.json()
    assert (response.status, body["status"]) == (202, "queued")
    assert Queue(redis_client, "q").get(body["job_id"]).status == JobStatus.QUEUED


async def test_concurrent_enqueue_requests_share_script_calls(client: Any, redis_client: Any) -> None:
    """The API keeps one client per queue, so enqueues of requests in flight together go out
    in shared script calls (antre.enqueue_batcher); each request still gets its own job."""
    await client.post("/v1/queues/q/jobs", json={"type": "warm-up"})
    before = script_calls(redis_client)
    responses = await asyncio.gather(*(client.post("/v1/queues/q/jobs", json={
        "type": "t", "payload": {"n": n}}) for n in range(100)))
    calls = script_calls(redis_client) - before
    bodies = [await response.json() for response in responses]
    assert [response.status for response in responses] == [202] * 100
    assert len({body["job_id"] for body in bodies}) == 100
    queue = Queue(redis_client, "q")
    assert [queue.get(body["job_id"]).payload for body in bodies] == [{"n": n} for n in range(100)]
    assert calls < 100, f"{calls} script calls for 100 requests"
