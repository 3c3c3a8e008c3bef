"""How the API answers what the protocol refuses or cannot decode.

Covers: an idempotency key reused for another type or payload is 409, not the original job and
its payload (issue 12.8); the dead-letter list shows a record whose payload is not JSON, raw,
beside the others (issue 10.5).
"""

from __future__ import annotations

from typing import Any

from antre import Queue


async def test_an_idempotency_key_reused_for_another_request_is_409(client: Any) -> None:
    job = {"type": "charge", "payload": {"amount": 5}, "idempotency_key": "order-42"}
    first = await client.post("/v1/queues/q/jobs", json=job)
    assert first.status == 202
    job_id = (await first.json())["job_id"]
    for other in ({**job, "payload": {"amount": 500}}, {**job, "type": "refund"}):
        response = await client.post("/v1/queues/q/jobs", json=other)
        assert response.status == 409
        body = await response.json()
        assert (body["error"], body["field"]) == ("idempotency_conflict", "idempotency_key")
        assert "amount" not in str(body)  # the first request's payload is not handed out
        assert body["message"] == (f"idempotency key order-42 was used for job {job_id} "
                                   "with another type or payload"), "no job number of a call"
    same = await client.post("/v1/queues/q/jobs", json=job)
    assert (same.status, (await same.json())["job_id"]) == (200, job_id)


async def test_the_dead_list_shows_a_record_it_cannot_decode(client: Any, redis_client: Any) -> None:
    queue = Queue(redis_client, "q")
    for job_id, payload in (("fine", "1"), ("garbled", "{not json")):
        redis_client.hset(queue.keys.job(job_id), mapping={
            "id": job_id, "type": "t", "payload": payload, "status": "dead", "attempt": 1,
            "max_attempts": 1, "lease": 1, "created_at": 1, "updated_at": 1, "died_at": 1})
        redis_client.zadd(queue.keys.dead, {job_id: 1})
    response = await client.get("/v1/queues/q/dead")
    assert response.status == 200
    body = await response.json()
    jobs = {job["id"]: job for job in body["jobs"]}
    assert body["total"] == 2 and set(jobs) == {"fine", "garbled"}
    assert jobs["garbled"]["payload"] == "{not json"
    assert jobs["garbled"]["payload_error"].startswith("undecodable payload:")
    assert "payload_error" not in jobs["fine"]
