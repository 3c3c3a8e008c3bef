"""The chart's CRDs: the JobQueue CRD is a byte-identical copy of the top-level crds/.

crds/ at the repository root is the one source (what `kubectl apply -f crds/` installs);
charts/antre/crds/ holds a copy because helm installs only CRDs inside the chart. Fix a
mismatch with: bash scripts/sync_crds.sh. The kopf peering CRDs are framework objects kept
only in the chart. Every CRD the chart ships must itself be a valid CRD object.
"""

from __future__ import annotations

import kubernetes_validate
import pytest

from .helm_runner import CHART_DIR, REPO_ROOT, load_crds

TOP_LEVEL = REPO_ROOT / "crds"
CHART_ONLY = {"kopf.dev-peerings.yaml"}


def test_jobqueue_crd_is_shipped() -> None:
    assert (TOP_LEVEL / "jobqueues.antre.dev.yaml").is_file()
    assert (CHART_DIR / "crds" / "jobqueues.antre.dev.yaml").is_file()


@pytest.mark.parametrize("name", sorted(p.name for p in TOP_LEVEL.glob("*.yaml")))
def test_chart_copy_is_byte_identical(name: str) -> None:
    copy = CHART_DIR / "crds" / name
    assert copy.is_file(), f"charts/antre/crds/{name} missing: run bash scripts/sync_crds.sh"
    assert copy.read_bytes() == (TOP_LEVEL / name).read_bytes(), (
        f"charts/antre/crds/{name} differs from crds/{name}: run bash scripts/sync_crds.sh")


def test_chart_has_no_stray_crds() -> None:
    top = {p.name for p in TOP_LEVEL.glob("*.yaml")}
    stray = {p.name for p in (CHART_DIR / "crds").glob("*.yaml")} - top - CHART_ONLY
    assert not stray, f"CRDs only in the chart: {stray}; add them to crds/ first"


def test_chart_crds_are_valid_objects() -> None:
    crds = load_crds(CHART_DIR / "crds")
    assert {"jobqueues.antre.dev", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"} <= set(crds)
    for crd in crds.values():
        kubernetes_validate.validate(crd, "1.31", strict=True)
