"""A hypothesis state machine over the protocol: random sequences of enqueue (an idempotency key
reused for the same or another payload; a queued field, or a job Hash as a producer in another
language writes it; the fields only while workers of this version alone serve the queue, so
workers of this and of an earlier version come and go), claim, ack with the current or a stale
token, fail, release, lease expiry + reap, replay and cancel. After every step the queue invariant holds and
every job's status and attempt match a plain Python model."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from antre import errors
from antre.client import Queue
from antre.protocol import scripts
from antre.protocol.ack import ack_op
from antre.protocol.claim import claim_op
from antre.protocol.fail import fail_op
from antre.protocol.release import FREE_RELEASES, release_op
from antre.settings import QueueSettings, WorkerSettings
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from invariants import assert_invariants, read_record
from protocol_state import dump
from registered_workers import register_earlier_worker, register_worker

QS = QueueSettings(name="sm", max_attempts=2)
WS = WorkerSettings(visibility_timeout_s=60)


@dataclass
class Model:
    status: str
    attempt: int = 0
    lease: int = 0
    idem: str | None = None
    #: For retrying jobs: whether the retry is already due (delay 0) or far away.
    due: bool = True
    releases: int = 0


def build_machine(r):
    class ProtocolMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            r.flushall()
            self.queue = Queue(r, settings=QS)
            self.jobs: dict[str, Model] = {}
            self.markers: dict[str, str] = {}  # idempotency key -> job id
            self.payloads: dict[str, int] = {}  # idempotency key -> the payload it was used for
            #: The last claim that leased jobs: its id, and the leases it made.
            self.last_claim: tuple[str, dict[str, int]] | None = None
            self.claims = 0

        def ids(self, *statuses):
            return sorted(i for i, m in self.jobs.items() if m.status in statuses)

        def tombstones(self):
            """Ids of cancelled jobs still in the ready list (a claim pops and drops them)."""
            return sum(1 for job_id in r.lrange(QS.keys.ready, 0, -1)
                       if self.jobs[job_id].status == "cancelled")

        @rule(idem=st.sampled_from([None, None, "k1", "k2"]), delay=st.sampled_from([0, 0, 60]),
              payload=st.sampled_from([1, 1, 2]))
        def enqueue(self, idem, delay, payload):
            if idem in self.markers and self.payloads[idem] != payload:
                with pytest.raises(errors.IdempotencyConflict):
                    self.queue.enqueue("t", payload, idempotency_key=idem, delay=delay)
                return
            result = self.queue.enqueue("t", payload, idempotency_key=idem, delay=delay)
            if idem in self.markers:
                assert (result.job_id, result.created) == (self.markers[idem], False)
                return
            assert result.created
            self.jobs[result.job_id] = Model("scheduled" if delay else "queued", idem=idem, due=False)
            if idem:
                self.markers[idem] = result.job_id
                self.payloads[idem] = payload

        @rule(who=st.sampled_from(["this version", "an earlier version beside it", "nobody"]))
        def serving_workers(self, who):
            """Who serves the queue decides the form enqueue writes (PROTOCOL.md "Versions"), so
            the forms meet in every later step."""
            r.delete(QS.keys.workers, QS.keys.field_readers)  # every worker stopped
            if who != "nobody":
                register_worker(r, QS)
            if who.startswith("an earlier"):
                register_earlier_worker(r, QS)

        @rule(delay=st.sampled_from([False, False, True]))
        def enqueue_as_a_hash(self, delay):
            """A job Hash as earlier versions and producers in other languages write it
            (PROTOCOL.md), beside the queued fields enqueue writes: the claim takes both."""
            job_id = f"h{len(self.jobs)}"
            now = int(r.time()[0]) * 1000
            record = {"id": job_id, "type": "t", "payload": "1", "status": "queued",
                      "attempt": 0, "max_attempts": QS.max_attempts, "lease": 0,
                      "created_at": now, "schema_version": 1}
            pipe = r.pipeline(transaction=True)
            if delay:
                pipe.hset(QS.keys.job(job_id), mapping={**record, "status": "scheduled",
                                                        "queued_at": now + 60_000})
                pipe.zadd(QS.keys.retry, {job_id: now + 60_000})
            else:
                pipe.hset(QS.keys.job(job_id), mapping=record)
                pipe.lpush(QS.keys.ready, job_id)
            pipe.execute()
            self.jobs[job_id] = Model("scheduled" if delay else "queued", due=False)

        @rule(max_jobs=st.integers(1, 3))
        def claim(self, max_jobs):
            runnable = set(self.ids("queued")) | {i for i in self.ids("retrying") if self.jobs[i].due}
            tombstones = self.tombstones()
            self.claims += 1
            claim_id = f"claim-{self.claims}"
            result = scripts.run(r, claim_op(QS, WS, worker_id="w", max_jobs=max_jobs,
                                             claim_id=claim_id))
            if result.jobs:
                self.last_claim = (claim_id, {job.id: job.lease for job in result.jobs})
            dropped = tombstones - self.tombstones()
            assert len(result.jobs) + dropped == min(max_jobs, len(runnable) + tombstones)
            for job in result.jobs:
                assert job.id in runnable
                model = self.jobs[job.id]
                model.status, model.attempt, model.lease = "processing", model.attempt + 1, model.lease + 1
                assert (job.attempt, job.lease) == (model.attempt, model.lease)
            for job_id in runnable - {j.id for j in result.jobs}:
                if self.jobs[job_id].status == "retrying":
                    self.jobs[job_id].status = "queued"  # promoted to the ready list

        @precondition(lambda self: self.last_claim is not None)
        @rule()
        def claim_sent_again(self):
            """The last claim's reply was lost: sent again, it answers its own leases that are
            still held, and changes nothing (the model's statuses, attempts and depths)."""
            assert self.last_claim is not None
            claim_id, leases = self.last_claim
            result = scripts.run(r, claim_op(QS, WS, worker_id="w", max_jobs=3,
                                             claim_id=claim_id))
            assert result.replayed_claimed_at_ms is not None
            assert {job.id: job.lease for job in result.jobs} == {
                job_id: lease for job_id, lease in leases.items()
                if self.jobs[job_id].status == "processing" and self.jobs[job_id].lease == lease}

        @precondition(lambda self: self.ids("processing"))
        @rule(data=st.data(), stale=st.booleans())
        def ack(self, data, stale):
            job_id = data.draw(st.sampled_from(self.ids("processing")))
            model = self.jobs[job_id]
            token = model.lease - 1 if stale else model.lease
            held = scripts.run(r, ack_op(QS, [(job_id, token)], worker_id="w")).held
            assert held == [not stale]
            if not stale:
                model.status = "done"
                if model.idem:
                    marker = r.get(QS.keys.idempotency(model.idem))
                    assert marker.startswith(f"{job_id}|") and marker.endswith("|done")

        @precondition(lambda self: self.ids("processing"))
        @rule(data=st.data(), delay=st.sampled_from([0, 60_000, None]))
        def fail(self, data, delay):
            job_id = data.draw(st.sampled_from(self.ids("processing")))
            model = self.jobs[job_id]
            with pytest.raises(errors.LeaseLost):
                scripts.run(r, fail_op(QS, (job_id, model.lease - 1), error="stale", retry_delay_ms=0,
                                       worker_id="w"))
            op = fail_op(QS, (job_id, model.lease), error="boom", retry_delay_ms=delay,
                         worker_id="w")
            result = scripts.run(r, op)
            # Sent again (its reply lost): the same answer, nothing changed.
            after = dump(r, QS)
            assert scripts.run(r, op) == result and dump(r, QS) == after
            dead = delay is None or model.attempt >= QS.max_attempts
            assert result.outcome == ("dead" if dead else "retrying")
            model.status, model.due = ("dead", False) if dead else ("retrying", delay == 0)

        @precondition(lambda self: self.ids("processing"))
        @rule(data=st.data())
        def release(self, data):
            job_id = data.draw(st.sampled_from(self.ids("processing")))
            model = self.jobs[job_id]
            op = release_op(QS, [(job_id, model.lease)], worker_id="w", reason="stop")
            released = scripts.run(r, op)
            after = dump(r, QS)
            assert scripts.run(r, op) == released and dump(r, QS) == after
            model.releases += 1
            if model.releases <= FREE_RELEASES:
                model.attempt -= 1  # a free release gives the attempt back
            model.status = "dead" if model.attempt >= QS.max_attempts else "queued"
            assert released == ["dead" if model.status == "dead" else "released"]

        @rule()
        def expire_leases_and_reap(self):
            for job_id in self.ids("processing"):
                r.zadd(QS.keys.processing, {job_id: 0})
            result = self.queue.reap()
            expected_dead = 0
            for job_id in self.ids("processing"):
                model = self.jobs[job_id]
                if model.attempt >= QS.max_attempts:
                    model.status = "dead"
                    expected_dead += 1
                else:
                    model.status = "queued"
            for job_id in self.ids("retrying"):
                if self.jobs[job_id].due:
                    self.jobs[job_id].status = "queued"
            assert result.dead == expected_dead

        @rule()
        def replay(self):
            replayed = self.queue.replay()
            assert sorted(replayed) == self.ids("dead")
            for job_id in replayed:
                model = self.jobs[job_id]
                model.status, model.attempt, model.releases = "queued", 0, 0

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def cancel(self, data):
            job_id = data.draw(st.sampled_from(sorted(self.jobs)))
            model = self.jobs[job_id]
            if model.status == "processing":
                with pytest.raises(errors.JobBusy):
                    self.queue.cancel(job_id)
                return
            assert self.queue.cancel(job_id) == model.status
            if model.status not in ("done", "cancelled"):
                model.status = "cancelled"
                if model.idem and self.markers.get(model.idem) == job_id:
                    del self.markers[model.idem]

        @invariant()
        def matches_model(self):
            assert_invariants(r, QS)
            for job_id, model in self.jobs.items():
                fields = read_record(r, QS, job_id)
                assert fields["status"] == model.status, (job_id, fields, model)
                assert int(fields["attempt"]) == model.attempt, (job_id, fields, model)
            depth = self.queue.stats()
            assert depth.processing == len(self.ids("processing"))
            assert depth.dead == len(self.ids("dead"))
            assert depth.ready == len(self.ids("queued")) + self.tombstones()
            assert depth.scheduled == len(self.ids("retrying", "scheduled"))

    return ProtocolMachine


def test_protocol_state_machine(redis_client):
    run_state_machine_as_test(
        build_machine(redis_client),
        settings=settings(max_examples=30, stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture]),
    )
