"""PROTOCOL.md's recipes for producers in other languages work as written: each MULTI block (a
queued field, and a job Hash as earlier versions wrote it) is read from the document, sent as it
stands, and the job is claimed, run and acked; the enqueue script called with the KEYS the
document lists, in its order, enqueues a job a worker claims."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from antre import Queue, QueueSettings, WorkerSettings
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from invariants import assert_invariants

DOC = Path(__file__).resolve().parents[2] / "PROTOCOL.md"


def recipes() -> list[list[list[str]]]:
    text = DOC.read_text()
    blocks = []
    for part in text.split("```\nMULTI\n")[1:]:
        block = "MULTI\n" + part[:part.index("```")]
        blocks.append([shlex.split(line) for line in block.strip().splitlines()])
    return blocks


@pytest.mark.parametrize("form", [pytest.param(0, id="queued-field"), pytest.param(1, id="hash")])
def test_the_documented_multi_block_enqueues_a_job_a_worker_runs(redis_client, form) -> None:
    commands = recipes()[form]
    assert [c[0] for c in commands] == [
        ["MULTI", "HSETNX", "LPUSH", "HINCRBY", "EXEC"], ["MULTI", "HSET", "LPUSH", "EXEC"]][form]
    pipe = redis_client.pipeline(transaction=True)  # MULTI ... EXEC
    for command in commands[1:-1]:
        pipe.execute_command(*command)
    pipe.execute()
    qs = QueueSettings(name="emails")
    [job] = scripts.run(redis_client, claim_op(qs, WorkerSettings(), worker_id="w", max_jobs=5)).jobs
    assert (job.type, job.payload_json, job.attempt, job.max_attempts) == (
        "send_email", '{"to":"ana@example.com"}', 1, 5)
    assert scripts.run(redis_client, ack_op(qs, [(job.id, job.lease)], worker_id="w")).held == [True]
    info = Queue(redis_client, settings=qs).get(job.id)
    assert [event.event for event in info.history] == ["enqueued", "claimed", "acked"]
    assert_invariants(redis_client, qs)


def test_the_documented_enqueue_call_enqueues_a_job_a_worker_runs(redis_client) -> None:
    """The KEYS and ARGV of "Enqueueing from another language", in the order the document gives
    them, run against enqueue.lua with _prelude.lua prepended, as it tells a producer to do."""
    text = DOC.read_text()
    keys_text = text[text.index("KEYS = ["):text.index("ARGV = [")]
    fixed = [key.strip() for key in keys_text[len("KEYS = ["):keys_text.index("<p>:{Q}:job:<id1>")]
             .split(",") if key.strip()]
    job_id = "0193f1c2a9b7e4d2c1a0b9f8e7d"
    keys = [key.replace("<p>", "antre").replace("{Q}", "{emails}") for key in fixed]
    keys.append(f"antre:{{emails}}:job:{job_id}")
    protocol = Path(scripts.__file__).parent
    source = (protocol / "_prelude.lua").read_text() + (protocol / "enqueue.lua").read_text()
    reply = redis_client.eval(source, len(keys), *keys, 1, 0,
                              job_id, "send_email", '{"to":"ana@example.com"}', 5, 0, "", "", "")
    assert reply == [job_id, 1]
    qs = QueueSettings(name="emails")
    [job] = scripts.run(redis_client, claim_op(qs, WorkerSettings(), worker_id="w", max_jobs=5)).jobs
    assert (job.id, job.type, job.attempt) == (job_id, "send_email", 1)
    assert_invariants(redis_client, qs)
