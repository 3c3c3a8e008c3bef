"""The chart's monitoring templates (ServiceMonitor, PodMonitor, dashboard ConfigMap,
PrometheusRule), rendered with helm.

Covers: nothing renders by default; each object renders
when enabled, with its labels and selectors; the dashboard is valid JSON with every panel on a
datasource variable; the four alerts exist with thresholds taken from values; the
schema rejects unknown keys and bad durations; every value is read by a template.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart.helm_runner import CHART_DIR, find_helm

HERE = Path(__file__).parent
ALL_ON = {"monitoring": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True},
                         "dashboard": {"enabled": True}, "prometheusRule": {"enabled": True}}}


@pytest.fixture(scope="module")
def helm() -> str:
    found = find_helm()
    assert found is not None, "helm not found: run scripts/fetch_helm.sh"
    return found


@pytest.fixture(scope="module")
def chart() -> Path:
    return CHART_DIR


def template(helm: str, chart_dir: Path, values: dict[str, Any], tmp_path: Path,
             *, check: bool = True) -> subprocess.CompletedProcess[str]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = subprocess.run([helm, "template", "rel", str(chart_dir), "--namespace", "mon",
                             "--values", str(values_file)], capture_output=True, text=True,
                            timeout=60, check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def objects(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout) if (doc
            and doc["kind"] in {"ServiceMonitor", "PodMonitor", "PrometheusRule"})
            or (doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard"))}


def test_off_by_default(helm: str, chart: Path, tmp_path: Path) -> None:
    assert objects(template(helm, chart, {}, tmp_path)) == {}


def test_every_object_renders_when_enabled(helm: str, chart: Path, tmp_path: Path) -> None:
    found = objects(template(helm, chart, ALL_ON, tmp_path))
    assert set(found) == {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"}

    monitor = found["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics",
                                             "interval": "30s", "honorLabels": True}]

    pods = found["PodMonitor"]["spec"]
    assert pods["selector"]["matchLabels"]["app.kubernetes.io/managed-by"] == "antre-operator"
    assert pods["namespaceSelector"] == {"any": True}
    assert [e["port"] for e in pods["podMetricsEndpoints"]] == ["metrics", "http"]

    dashboard = found["ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(dashboard["data"]["antre.json"])
    assert board["uid"] == "antre-queues"
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in board["panels"])
    exprs = " ".join(t["expr"] for panel in board["panels"] for t in panel["targets"])
    for metric in ("antre_queue_jobs", "antre_queue_oldest_ready_age_seconds",
                   "antre_jobs_total", "antre_job_duration_seconds_bucket",
                   "antre_job_latency_seconds_bucket", "antre_lock_contention_total",
                   "antre_reaper_requeued_total", "antre_lease_extensions_total"):
        assert metric in exprs, metric


def test_alerts_take_their_thresholds_from_values(helm: str, chart: Path, tmp_path: Path) -> None:
    values = {"monitoring": {"prometheusRule": {
        "enabled": True, "labels": {"release": "kps"}, "severity": "page",
        "deadLettersGrowing": {"threshold": 5, "window": "30m"},
        "expiredLeases": {"for": "7m"}, "oldestJobTooOld": {"seconds": 900},
        "backlogNoWorkers": {"for": "15m", "severity": "critical"}}}}
    rule = objects(template(helm, chart, values, tmp_path))["PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kps"
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert set(rules) == {"AntreDeadLettersGrowing", "AntreExpiredLeases", "AntreOldestJobTooOld",
                          "AntreBacklogNoWorkers"}
    assert rules["AntreDeadLettersGrowing"]["expr"].endswith("[30m])) > 5")
    assert rules["AntreExpiredLeases"]["for"] == "7m"
    assert rules["AntreOldestJobTooOld"]["expr"].endswith("> 900")
    assert rules["AntreBacklogNoWorkers"]["for"] == "15m"
    assert rules["AntreBacklogNoWorkers"]["labels"]["severity"] == "critical"
    assert rules["AntreOldestJobTooOld"]["labels"]["severity"] == "page"
    # Prometheus templating survives helm's: the annotations keep their {{ $labels.queue }}.
    assert "{{ $labels.queue }}" in rules["AntreExpiredLeases"]["annotations"]["summary"]


def test_pod_monitor_namespaces(helm: str, chart: Path, tmp_path: Path) -> None:
    values = {"monitoring": {"podMonitor": {"enabled": True, "namespaces": ["team-a"]}}}
    pods = objects(template(helm, chart, values, tmp_path))["PodMonitor"]["spec"]
    assert pods["namespaceSelector"] == {"matchNames": ["team-a"]}


@pytest.mark.parametrize("values", [
    pytest.param({"monitoring": {"serviceMonitor": {"enable": True}}}, id="unknown-key"),
    pytest.param({"monitoring": {"prometheusRule": {"deadLettersGrowing": {"window": "soon"}}}},
                 id="bad-duration"),
    pytest.param({"monitoring": {"prometheusRule": {"oldestJobTooOld": {"seconds": 0}}}},
                 id="zero-seconds"),
])
def test_schema_rejects_bad_monitoring_values(helm: str, chart: Path, tmp_path: Path,
                                            values: dict[str, Any]) -> None:
    assert template(helm, chart, values, tmp_path, check=False).returncode != 0


def test_every_monitoring_value_is_read_by_a_template() -> None:
    text = "\n".join(p.read_text() for p in (CHART_DIR / "templates").glob("monitoring-*.yaml"))

    def leaves(node: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for key, value in node.items():
            path = f"{prefix}.{key}"
            out += leaves(value, path) if isinstance(value, dict) and value and \
                not key.endswith(("labels", "annotations")) else [path]
        return out

    monitoring = {"monitoring": yaml.safe_load((CHART_DIR / "values.yaml").read_text())["monitoring"]}
    for path in leaves(monitoring, ""):
        assert f".Values{path}" in text, path
