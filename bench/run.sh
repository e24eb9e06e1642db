#!/usr/bin/env bash
# make bench: builds shoal and the peer agents (Prometheus in agent mode,
# vmagent) and runs the harness: the idle point, the side by side in 3
# rounds, a profile of shoal, the memory-growth curve to 1M series, the ring
# and gossip simulations and the Go micro-benchmarks (about 50 minutes on 2
# cores; the harness prints its plan first). The results replace the
# generated sections of docs/BENCHMARKS.md and, after at least 3 rounds,
# README.md's performance paragraph.
#
#   SHOAL_BENCH_CACHE  where binaries are built and cached, outside the
#                      repository (default ~/.cache/shoal-bench)
#   extra arguments    passed to the harness, e.g. --rounds=1, --skip-growth
#                      or --agents=shoal,prometheus-agent (see --help)
#
# A peer or shoal that cannot be built is reported as missing in the
# document (with the build error) and makes this script exit non-zero after
# the rest has run.
set -uo pipefail
cd "$(dirname "$0")/.."
CACHE="${SHOAL_BENCH_CACHE:-$HOME/.cache/shoal-bench}"
export SHOAL_BENCH_CACHE="$CACHE"
mkdir -p "$CACHE"
start=$(date +%s)
status=0

bench/build-peers.sh || status=1

# shoal is rebuilt every time: it is the code under test.
shoal="$CACHE/shoal-under-test"
rm -f "$shoal"
version="$(git describe --tags --always --dirty 2>/dev/null || echo dev)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
case "$version" in *-dirty) echo "bench: measuring $revision with uncommitted changes ($version)" ;; esac
shoal_missing=""
if ! go build -ldflags "-X github.com/prometheus/common/version.Version=$version -X github.com/prometheus/common/version.Revision=$revision -X github.com/prometheus/common/version.Branch=main" \
	-o "$shoal" ./cmd/shoal >"$CACHE/shoal.build.log" 2>&1; then
	shoal_missing="go build ./cmd/shoal failed: $(tail -n 5 "$CACHE/shoal.build.log" | tr '\n' ' ')"
	echo "bench: $shoal_missing"
	status=1
fi

go build -o "$CACHE/harness" ./bench/cmd/harness || exit 1
"$CACHE/harness" \
	--shoal="$shoal" --shoal-missing="$shoal_missing" \
	--prometheus="$CACHE/prometheus" --vmagent="$CACHE/vmagent" \
	--command="make bench${*:+ (bench/run.sh $*)}" \
	"$@" || status=1

echo "bench: finished in $(($(date +%s) - start))s, status $status; results in docs/BENCHMARKS.md unless --doc said otherwise"
exit $status
