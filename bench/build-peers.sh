#!/usr/bin/env bash
# Builds the peer agents the benchmark compares shoal with, into a cache
# directory outside the repository. Nothing built here is committed.
#
#   SHOAL_BENCH_CACHE   cache directory (default ~/.cache/shoal-bench)
#   PROMETHEUS_VERSION  Go module version of Prometheus (default: the one in go.mod)
#   VMAGENT_VERSION     VictoriaMetrics release (default v1.151.0)
#
# Each peer is built in its own throw-away module so that our go.mod is never
# touched, and outside any Go workspace (GOWORK=off): a go.work in a parent
# directory of the cache would otherwise build the peer from the workspace's
# modules. A binary that already exists for the requested version is reused.
# A peer that fails to build is reported (with the build log path) and the
# script goes on: the harness then lists that peer as missing.
set -u
cd "$(dirname "$0")/.."
CACHE="${SHOAL_BENCH_CACHE:-$HOME/.cache/shoal-bench}"
PROM_VER="${PROMETHEUS_VERSION:-$(awk '$1=="github.com/prometheus/prometheus"{print $2; exit}' go.mod)}"
VM_VER="${VMAGENT_VERSION:-v1.151.0}"
mkdir -p "$CACHE"
export GOWORK=off
status=0

build() { # name version dir module pkg
	local name=$1 ver=$2 mod=$3 pkg=$4
	local out="$CACHE/$name-$ver" dir="$CACHE/src/$name-$ver" log="$CACHE/$name-$ver.build.log"
	if [ -x "$out" ]; then
		echo "peer $name $ver: cached at $out"
		ln -sf "$out" "$CACHE/$name"
		return 0
	fi
	echo "peer $name $ver: building (log: $log)"
	rm -rf "$dir" && mkdir -p "$dir"
	if (
		cd "$dir" &&
			go mod init "shoalbench/$name" &&
			go get "$pkg@$ver" &&
			go build -trimpath -o "$out.tmp" "$pkg"
	) >"$log" 2>&1; then
		mv "$out.tmp" "$out"
		ln -sf "$out" "$CACHE/$name"
		echo "peer $name $ver: built $out"
	else
		echo "peer $name $ver: BUILD FAILED, last lines of $log:"
		tail -n 15 "$log" | sed 's/^/    /'
		rm -f "$CACHE/$name"
		status=1
	fi
}

build prometheus "$PROM_VER" github.com/prometheus/prometheus github.com/prometheus/prometheus/cmd/prometheus
build vmagent "$VM_VER" github.com/VictoriaMetrics/VictoriaMetrics github.com/VictoriaMetrics/VictoriaMetrics/app/vmagent
exit $status
