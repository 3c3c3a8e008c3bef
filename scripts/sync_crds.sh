#!/usr/bin/env bash
# Copy the canonical CRDs (crds/ at the repository root) into the chart (charts/antre/crds/).
# helm installs only the CRDs inside a chart, so the chart keeps a byte-identical copy;
# tests/chart/test_crds_in_sync.py fails until this has been run after a CRD change.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
for crd in "$repo_root"/crds/*.yaml; do
    cp "$crd" "$repo_root/charts/antre/crds/"
    echo "synced crds/$(basename "$crd") -> charts/antre/crds/"
done
