"""checkpoint.lua: step results are written only under the current lease token."""

from __future__ import annotations

import pytest
from antre import errors
from antre.protocol import scripts
from antre.protocol.checkpoint import checkpoint_op
from invariants import assert_invariants
from protocol_state import dump, run_fresh, seed_job


def test_checkpoint_with_current_token(redis_client, qs):
    seed_job(redis_client, qs, "a", status="processing", attempt=1, lease=2)
    run_fresh(redis_client, checkpoint_op(qs, ("a", 2), step="charge", value_json='{"id":7}',
                                                   worker_id="w1"))
    state = dump(redis_client, qs)
    assert state["jobs"]["a"]["step:charge"] == '{"id":7}'
    assert state["jobs"]["a"]["status"] == "processing"
    assert_invariants(redis_client, qs)


@pytest.mark.parametrize("seed", [
    pytest.param({"status": "processing", "lease": 3}, id="newer-lease"),
    pytest.param({"status": "queued", "lease": 2}, id="requeued"),
    pytest.param({"status": "processing", "lease": 2, "worker": "w2"}, id="claimed-by-another-worker"),
])
def test_checkpoint_with_stale_token_writes_nothing(redis_client, qs, seed):
    seed_job(redis_client, qs, "a", attempt=1, **seed)
    before = dump(redis_client, qs)
    with pytest.raises(errors.LeaseLost):
        scripts.run(redis_client, checkpoint_op(qs, ("a", 2), step="charge", value_json="1",
                                                              worker_id="w1"))
    assert dump(redis_client, qs) == before
