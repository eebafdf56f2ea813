#!/usr/bin/env bash
# Builds the test bed's binaries from the Go module proxy into $1 (default .testbed/bin).
# A stamp of go.mod/go.sum and this script skips the build when nothing changed; Go's module
# and build caches make a rebuild after a change fast.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-$here/../.testbed/bin}" && cd "${1:-$here/../.testbed/bin}" && pwd)"
kube_version=v1.36.3

# Only the module proxy: never fall back to fetching sources from their origin.
export GOPROXY=https://proxy.golang.org GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0
stamp="$(cat "$here/go.mod" "$here/go.sum" "$here/kwok/go.mod" "$here/kwok/go.sum" "$0" | sha256sum | cut -c1-16)"
if [[ -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" ]]; then
  echo "testbed: binaries up to date in $out"
  exit 0
fi
rm -f "$out/.stamp"
start=$(date +%s)
# kube's own build stamps these; kubectl version and /version report them.
version_flags="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1"
version_flags+=" -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean"
version_flags+=" -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"
(cd "$here" && go build -ldflags "-s -w $version_flags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  ./cmd/etcd)
(cd "$here/kwok" && go build -ldflags "-s -w" -o "$out/" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl)
# kwok's CRDs (Logs, Exec, ...) come from the same pinned module; the test bed installs them per cluster.
crds="$out/../kwok-crds"
rm -rf "$crds" && mkdir -p "$crds"
cp "$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"/kustomize/crd/bases/*.yaml "$crds/"
chmod -R u+w "$crds"
echo "$stamp" > "$out/.stamp"
echo "testbed: built $(ls "$out" | tr '\n' ' ')in $(( $(date +%s) - start ))s into $out"
