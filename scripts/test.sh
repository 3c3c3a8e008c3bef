#!/usr/bin/env bash
# README's test command: install what the suite needs on this machine, then run it.
#
#   bash scripts/test.sh [pytest arguments]
#
# 1. System packages (Debian/Ubuntu): redis-server and redis-sentinel, chromium with
#    chromium-driver (the dashboard's browser tests) and openssl (a TLS test's CA directory),
#    when they are missing, with apt-get as root (otherwise it prints the command to run and stops).
# 2. A virtual environment ($ANTRE_TEST_VENV, default <repo>/.venv; created when missing) with
#    the package and its `test` extra installed at the versions pinned in tests/constraints.txt.
# 3. The helm and kubectl binaries the chart and Kubernetes tests run, and the Kubernetes control
#    plane binaries built from Go modules (scripts/fetch_kube.sh; all cached under .cache/).
# 4. pytest, with any arguments given, on $ANTRE_TEST_PROCESSES processes (default 3; pytest-xdist).
# Idempotent: a second run installs nothing new and goes straight to the tests.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-sentinel >/dev/null || missing+=(redis-sentinel)
command -v chromium >/dev/null || missing+=(chromium)
command -v openssl >/dev/null || missing+=(openssl)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if ((${#missing[@]})); then
    if [[ "$(id -u)" != 0 ]]; then
        echo "test.sh: missing ${missing[*]}; install them first: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "test.sh: installing ${missing[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
fi

venv="${ANTRE_TEST_VENV:-$repo_root/.venv}"
if [[ ! -x "$venv/bin/python" ]]; then
    echo "test.sh: creating the virtual environment $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv"
fi
echo "test.sh: installing the package and the pinned test tools into $venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c tests/constraints.txt -e '.[test]'

PYTHON="$venv/bin/python" bash scripts/fetch_helm.sh >/dev/null
# The end-to-end tests' Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# built from Go modules: several minutes the first time, with progress; then cached) and kubectl.
PYTHON="$venv/bin/python" bash scripts/fetch_kube.sh >/dev/null

# Several processes (tests that share the Kubernetes control plane stay on one: tests/conftest.py).
exec "$venv/bin/python" -m pytest -q -n "${ANTRE_TEST_PROCESSES:-3}" --dist loadgroup "$@"
