#!/usr/bin/env bash
# Builds kube-apiserver from the Go module proxy (no other download) into
# DEST/kube-apiserver. k8s.io/kubernetes is not meant to be a dependency: its
# go.mod replaces the k8s.io/* staging modules with directories of its own
# repository, which a module zip cannot use. A throwaway module requires it and
# replaces each staging module with the published release of the same version
# (Kubernetes v1.X.Y ships them as v0.X.Y).
# Usage: build-kube-apiserver.sh v1.37.2 DEST_DIR
set -euo pipefail
version="$1" dest="$2"
go="${GO:-go}"
staging="v0.${version#v1.}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export GOFLAGS=-buildvcs=false GOWORK=off
modfile="$("$go" mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
{
  echo "module shoal.local/kube-apiserver-build"
  echo
  sed -n 's/^go \(.*\)$/go \1/p' "$modfile"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*$#replace \1 => \1 '"$staging"'#p' "$modfile"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
"$go" mod tidy
# The version the server reports (/version): Helm checks a chart's kubeVersion
# against it, and the default of a source build is v0.0.0.
minor="${version#v1.}"; minor="${minor%%.*}"
pkg=k8s.io/component-base/version
mkdir -p "$dest"
"$go" build -trimpath -o "$dest/kube-apiserver.tmp" \
  -ldflags "-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" \
  k8s.io/kubernetes/cmd/kube-apiserver
mv "$dest/kube-apiserver.tmp" "$dest/kube-apiserver"
"$dest/kube-apiserver" --version
