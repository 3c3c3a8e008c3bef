"""Issue 10.5: every reader shows any record, raw where it cannot be decoded. A job
dead-lettered for an undecodable payload used to make ``dead_letters()``, ``get()`` and
``antre dlq list`` raise, hiding every other dead job: the records readers exist to show.

Aspects: an undecodable payload, an unknown status, a garbled history entry and a counter a
foreign producer wrote as text, through the sync and async clients and the command line.
"""

from __future__ import annotations

import json

import pytest
from antre import cli
from antre.client import AsyncQueue, Queue
from antre.connection import connect_async
from protocol_state import seed_job


@pytest.fixture
def garbled(redis_client, qs):
    seed_job(redis_client, qs, "fine", status="dead", attempt=5, lease=5, last_error="boom")
    seed_job(redis_client, qs, "garbled", status="dead", attempt=5, lease=5,
             last_error="undecodable payload: Expecting value")
    redis_client.hset(qs.keys.job("garbled"), mapping={
        "payload": "{not json", "h:1": "[broken", "max_attempts": "5.0", "step:s": "nope"})
    seed_job(redis_client, qs, "odd", status="dead", attempt=1, lease=1)
    redis_client.hset(qs.keys.job("odd"), "status", "mislaid")  # a hand edit
    return redis_client


def test_the_clients_show_every_record(garbled, qs):
    queue = Queue(garbled, settings=qs)
    infos = {info.id: info for info in queue.dead_letters()}
    assert set(infos) == {"fine", "garbled", "odd"}
    bad = infos["garbled"]
    assert bad.payload == "{not json" and bad.payload_error.startswith("undecodable payload:")
    assert (bad.max_attempts, bad.steps) == (5, {"s": "nope"})
    assert [(e.event, e.error) for e in bad.history] == [("unreadable", "[broken")]
    assert infos["odd"].status == "mislaid"
    assert queue.get("garbled").to_dict()["payload_error"] == bad.payload_error
    json.dumps([info.to_dict() for info in infos.values()])  # what the API and --json print
    assert infos["fine"].payload is None and infos["fine"].payload_error is None


async def test_the_async_client_shows_every_record(garbled, redis_url, qs):
    queue = AsyncQueue(connect_async(redis_url), settings=qs)
    try:
        assert {info.id for info in await queue.dead_letters()} == {"fine", "garbled", "odd"}
        assert (await queue.get("garbled")).payload == "{not json"
        assert await queue.dead_count() == 3
    finally:
        await queue.close()


def test_dlq_list_shows_every_record(garbled, redis_url, qs, capsys):
    assert cli.main(["dlq", "list", "--redis-url", redis_url, "--queue", qs.name]) == 0
    out = capsys.readouterr()
    assert sorted(line.split()[0] for line in out.out.splitlines()) == ["fine", "garbled", "odd"]
    assert "3 dead job(s) shown" in out.err
    assert cli.main(["dlq", "list", "--json", "--redis-url", redis_url, "--queue", qs.name]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {job["id"]: job.get("payload_error") is not None for job in listed} == {
        "fine": False, "garbled": True, "odd": False}
