#!/usr/bin/env bash
# Pin what the two images are built from, so that a rebuild gives the same bytes:
#   worker_image/requirements.txt        antre's dependencies (pyproject.toml), each pinned with
#                                        == and the sha256 of every file PyPI has for it
#   operator/requirements.txt            the same for antre[operator]
#   worker_image/build-requirements.txt  setuptools and wheel, which build antre's own wheel
#                                        (both Dockerfiles build with --no-build-isolation)
# and the python base image's digest in both Dockerfiles, where a registry is reachable.
#
# Usage: bash scripts/pin_images.sh [--upgrade]
#   The images get the versions the test suite runs against: tests/constraints.txt constrains
#   the two runtime locks, so move a dependency there first (its header says how). Other pins
#   (the build lock's setuptools and wheel) are kept as they are unless --upgrade is given,
#   which moves them to the newest release allowed.
#
# The lock files are resolved by pip-compile (pip-tools, installed into a throwaway virtualenv
# under .cache/pin_images) with this machine's Python, which must be the images' 3.11, and only
# from wheels (--only-binary=:all:, as the Dockerfiles install); the hashes cover every
# platform's wheel, so amd64 and arm64 builds check against the same file.
#
# The base digest needs registry access through crane, skopeo or docker buildx. Without any of
# them the Dockerfiles are left as they are and the script says so: a digest written here by
# hand could not be checked.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
upgrade=()
if [[ "${1:-}" == "--upgrade" ]]; then
    upgrade=(--upgrade)
elif [[ $# -gt 0 ]]; then
    echo "usage: bash scripts/pin_images.sh [--upgrade]" >&2
    exit 2
fi

python="${PYTHON:-python3}"
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$version" != "3.11" ]]; then
    echo "pin_images.sh: $python is Python $version; the images run 3.11, and markers in the" \
         "lock files are resolved for the Python that runs pip-compile. Set PYTHON=python3.11." >&2
    exit 1
fi

tools="$repo_root/.cache/pin_images"
if [[ ! -x "$tools/bin/pip-compile" ]]; then
    "$python" -m venv "$tools"
    "$tools/bin/pip" install --quiet "pip-tools>=7.4,<8"
fi

# Local wheel directories of this machine's pip configuration would leak into the files.
export PIP_FIND_LINKS=""
compile=("$tools/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras
         --no-emit-index-url --no-emit-find-links --no-emit-trusted-host
         --pip-args "--only-binary=:all:" "${upgrade[@]}")
"${compile[@]}" --constraint tests/constraints.txt \
    --output-file worker_image/requirements.txt pyproject.toml
"${compile[@]}" --constraint tests/constraints.txt --extra operator \
    --output-file operator/requirements.txt pyproject.toml
"${compile[@]}" --all-build-deps --only-build-deps \
    --output-file worker_image/build-requirements.txt pyproject.toml
echo "pin_images.sh: wrote worker_image/requirements.txt, operator/requirements.txt," \
     "worker_image/build-requirements.txt"

# -- the base image's digest --------------------------------------------------------------------
dockerfiles=(worker_image/Dockerfile operator/Dockerfile)
image="$(sed -n 's/^ARG PYTHON_IMAGE=\([^@]*\).*/\1/p' worker_image/Dockerfile)"
reference="docker.io/library/$image"
digest=""
if command -v crane >/dev/null; then
    digest="$(crane digest "$reference")"
elif command -v skopeo >/dev/null; then
    # The digest of the multi-platform index is the sha256 of its raw manifest.
    digest="sha256:$(skopeo inspect --raw "docker://$reference" | sha256sum | cut -d' ' -f1)"
elif command -v docker >/dev/null && docker buildx version >/dev/null 2>&1; then
    digest="$(docker buildx imagetools inspect "$reference" | awk '$1 == "Digest:" {print $2; exit}')"
fi
if [[ ! "$digest" =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "pin_images.sh: could not read the digest of $reference (needs crane, skopeo or" \
         "docker buildx and registry access); the Dockerfiles keep their digest, unverified." >&2
    exit 0
fi
for dockerfile in "${dockerfiles[@]}"; do
    sed -i -e "s|^ARG PYTHON_IMAGE=.*|ARG PYTHON_IMAGE=$image@$digest|" \
        -e "s|^# Base digest: .*|# Base digest: read from the registry by scripts/pin_images.sh on $(date -u +%F).|" \
        "$dockerfile"
done
echo "pin_images.sh: $image@$digest in ${dockerfiles[*]}"
