"""Status and conditions (pure), the CLI's arguments, settings from the environment.

Aspects: the condition matrix (ready, Redis down, bad spec, eviction warning, paused scaling);
lastTransitionTime only moves on a transition; an unchanged observation gives no patch; the
oldest age is coarse; CLI flags match what the Helm chart passes; settings validate like arq's
from_dsn.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest
from antre_operator import kube, settings, status
from antre_operator.__main__ import parse_args, settings_from_args

NUMBERS = status.QueueNumbers(ready=40, due=2, scheduled=5, processing=3, dead=1,
                              oldest_ready_age_s=75.5)
OK = status.Observation(generation=3, numbers=NUMBERS, replicas=2, ready_replicas=1,
                        desired_replicas=2, selector="a=b", eviction_checked=True,
                        workers=status.Workers(available=1))


def conditions(obs: status.Observation) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.conditions_for(obs)}


@pytest.mark.parametrize("obs, expected", [
    pytest.param(OK, {"Ready": ("True", "WorkersAvailable"), "RedisReachable": ("True", "Connected"),
                      "Scaling": ("True", "Active"), "RedisConfigured": ("True", "NoEviction")},
                 id="healthy"),
    pytest.param(status.Observation(generation=1, redis_error="refused", replicas=2),
                 {"Ready": ("False", "RedisUnreachable"),
                  "RedisReachable": ("False", "ConnectionFailed"),
                  "Scaling": ("False", "Paused"), "RedisConfigured": ("Unknown", "NotChecked")},
                 id="redis-down"),
    pytest.param(status.Observation(generation=1, problem=status.Problem("InvalidSpec", "x")),
                 {"Ready": ("False", "InvalidSpec"), "RedisReachable": ("Unknown", "NotChecked"),
                  "Scaling": ("False", "Paused"), "RedisConfigured": ("Unknown", "NotChecked")},
                 id="invalid-spec"),
    pytest.param(status.Observation(generation=1, numbers=NUMBERS, replicas=1,
                                    eviction_warning="allkeys-lru", eviction_checked=True),
                 {"Ready": ("True", "WorkersAvailable"), "RedisReachable": ("True", "Connected"),
                  "Scaling": ("True", "Active"),
                  "RedisConfigured": ("False", "EvictionPolicy")}, id="eviction-warning"),
    pytest.param(status.Observation(generation=1, numbers=NUMBERS, replicas=1,
                                    autoscaling=False),
                 {"Ready": ("True", "WorkersAvailable"), "RedisReachable": ("True", "Connected"),
                  "Scaling": ("False", "Disabled"),
                  "RedisConfigured": ("Unknown", "NotChecked")}, id="fixed-replicas"),
])
def test_condition_matrix(obs: status.Observation, expected: dict[str, Any]) -> None:
    assert conditions(obs) == expected


@pytest.mark.parametrize("api, expected", [
    pytest.param(None, None, id="api-disabled"),
    pytest.param(status.Api(name="q-api", wanted=2, available=None),
                 ("Unknown", "NotApplied", "Deployment q-api is not applied yet"), id="not-applied"),
    pytest.param(status.Api(name="q-api", wanted=2, available=0),
                 ("False", "ApiUnavailable",
                  "0/2 API pods available; see kubectl describe deployment q-api"), id="none-up"),
    pytest.param(status.Api(name="q-api", wanted=2, available=1),
                 ("True", "ApiPodsAvailable", "1/2 API pods available"), id="one-up"),
])
def test_the_api_has_a_condition_of_its_own(api: status.Api | None,
                                            expected: tuple[str, str, str] | None) -> None:
    """Ready speaks for the workers: an API that does not start is its own condition."""
    found = {c["type"]: (c["status"], c["reason"], c["message"])
             for c in status.conditions_for(dataclasses.replace(OK, api=api))}
    assert found.get("ApiAvailable") == expected
    assert found["Ready"][:2] == ("True", "WorkersAvailable")


def cronjob_status(**found: Any) -> dict[str, Any]:
    return {"kind": "CronJob", "status": found}


def reaper_seen(found: dict[str, Any] | None) -> status.Reaper:
    return status.observed_reaper(found, name="q-reaper", selector="q=r")


def test_the_reaper_condition_follows_the_cronjobs_runs() -> None:
    """A reaper that fails (a wrong image, a Redis it cannot reach) is shown; runs that succeed
    and runs under way change nothing, so a queue at rest writes no status for its reaper."""
    t = [f"2030-01-01T00:0{minute}:00Z" for minute in range(6)]
    ok = ("True", "NoFailedRun")
    failed = ("False", "LastRunFailed")
    runs = [
        (None, ok),  # not observed yet: no run, none failed
        (cronjob_status(), ok),
        (cronjob_status(lastScheduleTime=t[0], active=[{"name": "j0"}]), ok),
        (cronjob_status(lastScheduleTime=t[0], lastSuccessfulTime="2030-01-01T00:00:04Z"), ok),
        (cronjob_status(lastScheduleTime=t[1], lastSuccessfulTime="2030-01-01T00:00:04Z",
                        active=[{"name": "j1"}]), ok),
        (cronjob_status(lastScheduleTime=t[1], lastSuccessfulTime="2030-01-01T00:00:04Z"), failed),
        (cronjob_status(lastScheduleTime=t[2], lastSuccessfulTime="2030-01-01T00:00:04Z",
                        active=[{"name": "j2"}]), failed),
        (cronjob_status(lastScheduleTime=t[2], lastSuccessfulTime="2030-01-01T00:00:04Z"), failed),
        (cronjob_status(lastScheduleTime=t[3], lastSuccessfulTime="2030-01-01T00:03:05Z"), ok),
    ]
    previous: dict[str, Any] = {}
    writes = 0
    for step, (found, expected) in enumerate(runs):
        obs = dataclasses.replace(OK, reaper=reaper_seen(found))
        doc = status.render_status(obs, previous=previous, now=t[step % len(t)])
        [got] = [c for c in doc["conditions"] if c["type"] == "ReaperSucceeding"]
        assert (got["status"], got["reason"]) == expected, step
        writes += status.status_patch(doc, previous) is not None
        previous = doc
    # The first status, the failure and the recovery: nothing else.
    assert writes == 3
    first_failure = status.conditions_for(dataclasses.replace(OK, reaper=reaper_seen(runs[5][0])))
    assert first_failure[-1]["message"] == (
        "the last run of CronJob q-reaper did not succeed (last success: "
        "2030-01-01T00:00:04Z); expired leases wait for a worker's own reaper; "
        "see kubectl logs -l q=r")
    never = status.conditions_for(dataclasses.replace(OK, reaper=reaper_seen(
        cronjob_status(lastScheduleTime=t[0]))))[-1]
    assert never["status"] == "False" and "(last success: never)" in never["message"]
    assert "ReaperSucceeding" not in conditions(OK)


def test_render_status_fields() -> None:
    doc = status.render_status(OK, previous={}, now="2030-01-01T00:00:00Z")
    assert doc["observedGeneration"] == 3
    assert (doc["backlog"], doc["processing"], doc["dead"]) == (42, 3, 1)
    assert doc["oldestJobAgeSeconds"] == 60
    assert (doc["replicas"], doc["readyReplicas"], doc["desiredReplicas"]) == (2, 1, 2)
    assert all(c["lastTransitionTime"] == "2030-01-01T00:00:00Z" for c in doc["conditions"])


def test_transition_times_only_move_on_transitions() -> None:
    first = status.render_status(OK, previous={}, now="2030-01-01T00:00:00Z")
    same = status.render_status(OK, previous=first, now="2030-01-01T00:05:00Z")
    assert status.status_patch(same, first) is None, "nothing changed: no write"
    down = dataclasses.replace(OK, redis_error="refused", eviction_checked=False)
    later = status.render_status(down, previous=first, now="2030-01-01T00:09:00Z")
    times = {c["type"]: c["lastTransitionTime"] for c in later["conditions"]}
    assert times["Ready"] == "2030-01-01T00:09:00Z"
    assert times["RedisConfigured"] == "2030-01-01T00:09:00Z"  # True -> Unknown is a transition
    patch = status.status_patch(later, first)
    assert patch is not None and set(patch) == {"conditions"}


def test_no_condition_message_is_longer_than_the_cap() -> None:
    """Whatever a message quotes (a Redis server's text, an API server's refusal), the status
    stays small: each message is cut at MAX_CONDITION_MESSAGE_CHARS."""
    huge = "x" * (7 * 1024 * 1024)
    obs = dataclasses.replace(OK, redis_error=huge, eviction_warning=huge,
                              problem=status.Problem("InvalidSpec", huge))
    doc = status.render_status(obs, previous={}, now="2030-01-01T00:00:00Z")
    assert all(len(c["message"]) <= status.MAX_CONDITION_MESSAGE_CHARS
               for c in doc["conditions"])
    assert len(str(doc)) < 16 * 1024


def test_status_patch_removes_dropped_fields() -> None:
    assert status.status_patch({"a": 1}, {"a": 1, "b": 2}) == {"b": None}


@pytest.mark.parametrize("age, coarse", [(None, None), (0.4, 0), (59.9, 50), (61, 60),
                                         (3599, 3540), (7300, 7200)])
def test_coarse_age(age: float | None, coarse: int | None) -> None:
    assert status.coarse_age_s(age) == coarse


@pytest.mark.parametrize("argv, namespaces, peering, port", [
    pytest.param(["--all-namespaces", "--standalone", "--liveness=http://0.0.0.0:8080/healthz",
                  "--metrics-port=9999"], (), None, 9999, id="chart-cluster-wide"),
    pytest.param(["--namespace=a", "--namespace=b", "--standalone"], ("a", "b"), None, 8000,
                 id="chart-namespaced"),
    pytest.param(["--all-namespaces", "--peering=antre", "--metrics-port=0"], (), "antre", None,
                 id="chart-peering-no-metrics"),
])
def test_cli_matches_the_chart(argv: list[str], namespaces: tuple[str, ...],
                               peering: str | None, port: int | None) -> None:
    ours = settings_from_args(parse_args(argv))
    assert (ours.namespaces, ours.peering, ours.metrics_port) == (namespaces, peering, port)


def test_peering_priority() -> None:
    assert settings_from_args(parse_args(["--peering=x", "--priority=7"])).priority == 7
    randoms = {settings_from_args(parse_args(["--peering=x"])).priority for _ in range(5)}
    assert len(randoms) > 1, "replicas of one Deployment must not tie"


def test_cli_refuses_conflicting_flags() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--all-namespaces", "--namespace=a"])
    with pytest.raises(SystemExit):
        parse_args(["--standalone", "--peering=x"])


def test_settings_from_env() -> None:
    ours = settings.OperatorSettings.from_env({"ANTRE_OPERATOR_REDIS_TIMEOUT": "2.5"},
                                              metrics_port=None)
    assert ours.redis_timeout_s == 2.5 and ours.metrics_port is None
    with pytest.raises(ValueError, match="ANTRE_OPERATOR_POLLING_INTERVAL: got 'soon'"):
        settings.OperatorSettings.from_env({"ANTRE_OPERATOR_POLLING_INTERVAL": "soon"})
    with pytest.raises(ValueError, match="must be > 0"):
        settings.OperatorSettings.from_env({"ANTRE_OPERATOR_REDIS_TIMEOUT": "0"})


@pytest.mark.parametrize("api_key, token", [
    pytest.param({"BearerToken": "bearer abc"}, "abc", id="in-cluster"),
    pytest.param({"BearerToken": "Bearer xyz"}, "xyz", id="kubeconfig"),
    pytest.param({"authorization": "Bearer old"}, "old", id="older-client"),
    pytest.param({}, None, id="none"),
])
def test_bearer_token(api_key: dict[str, str], token: str | None) -> None:
    import kubernetes

    config = kubernetes.client.Configuration()
    config.api_key = api_key
    assert kube.bearer_token(config) == token


def test_the_command_without_the_operator_extra_says_what_to_install() -> None:
    """`pip install antre` installs the antre-operator script too; without kopf it must say
    which extra is missing, not print a traceback."""
    code = ("import sys\nsys.modules['kopf'] = None  # as if not installed\n"
            "from antre_operator.__main__ import main\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "pip install 'antre[operator]'" in result.stderr and "Traceback" not in result.stderr
