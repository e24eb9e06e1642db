#!/usr/bin/env bash
# make cold-check: .ci/run as on a machine that never saw the project. It
# clones HEAD (committed work only) into a temporary directory and runs
# .ci/run there with HOME, GOPATH, the Go build and module caches and make's
# tools cache (TOOLS_DIR) pointed at empty directories beside the clone. The
# Go toolchain and Debian packages (chromium, etcd-server) stay the machine's;
# .ci/run installs the packages when missing.
# Prints each phase's wall time and the total. COLD_DIR chooses the directory
# (it must not exist or be empty); COLD_KEEP=1 keeps it afterwards.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rev="$(git -C "$repo" rev-parse HEAD)"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "cold-check: uncommitted changes are not checked; it runs $rev" >&2
fi
dir="${COLD_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/shoal-cold.XXXXXX")}"
mkdir -p "$dir"
[ -z "$(ls -A "$dir")" ] || { echo "cold-check: $dir is not empty" >&2; exit 1; }
cleanup() {
  if [ "${COLD_KEEP:-}" = 1 ]; then
    echo "cold-check: kept $dir"
  else
    chmod -R u+w "$dir" 2>/dev/null || true # the module cache is read-only
    rm -rf "$dir"
  fi
}
trap cleanup EXIT

export PHASE_LOG="$dir/phases.tsv"
start=$(date +%s)
echo "cold-check: $rev in $dir"
"$repo/scripts/phase.sh" clone sh -c "git clone --quiet --no-local '$repo' '$dir/src' && git -C '$dir/src' checkout --quiet --detach '$rev'"
mkdir -p "$dir/home" "$dir/gopath" "$dir/gocache" "$dir/gomodcache" "$dir/tools"

# Only what names the machine (toolchain, proxies, locale) passes through;
# every cache starts empty.
passthrough=()
for v in PATH LANG LC_ALL TERM TMPDIR GOPROXY GONOSUMDB GONOPROXY GOPRIVATE GOSUMDB GOTOOLCHAIN \
  http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY CI; do
  [ -n "${!v:-}" ] && passthrough+=("$v=${!v}")
done
rc=0
(cd "$dir/src" && env -i "${passthrough[@]}" \
  HOME="$dir/home" GOPATH="$dir/gopath" GOCACHE="$dir/gocache" GOMODCACHE="$dir/gomodcache" \
  TOOLS_DIR="$dir/tools" PHASE_LOG="$PHASE_LOG" \
  ./.ci/run) || rc=$?
echo
"$repo/scripts/phase.sh" --summary "$PHASE_LOG"
total=$(($(date +%s) - start))
printf 'cold-check: %s after %dm%02ds wall clock (%d cores, load average now %s)\n' \
  "$([ "$rc" -eq 0 ] && echo passed || echo "FAILED (exit $rc)")" $((total / 60)) $((total % 60)) \
  "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
exit "$rc"
