#!/usr/bin/env bash
# Builds the test tools (helm, kube-apiserver) behind the test phases of
# `make test`:
#   tools-background.sh start TARGET   starts `make TARGET` under nice 19
#   tools-background.sh wait  TARGET   waits for that build, then runs
#                                      `make TARGET` (nothing when built)
# On a cold machine kube-apiserver's build is about a quarter of the suite's
# CPU, and the test phases leave a core idle much of the time (tests that
# wait for scrapes, gossip and hand-offs): at the lowest priority the build
# takes that idle time and hardly slows the tests. A failed background build
# is printed and then run again in the foreground, so that its error is the
# phase's. With PHASE_LOG set, the background build's wall time is recorded
# as the phase "bg:TARGET" (phase.sh --summary leaves it out of the total).
set -euo pipefail
cmd="${1:-}"
shift || true
make="${MAKE:-make}"
dir="${TOOLS_DIR:-$HOME/.cache/shoal-tools}"
mkdir -p "$dir"
[ $# -eq 1 ] || { echo "usage: $0 start|wait TARGET" >&2; exit 2; }
target="$1"
pidfile="$dir/background-$target.pid" log="$dir/background-$target.log"

case "$cmd" in
start)
  if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "tools: a background build is already running (pid $(cat "$pidfile"))"
    exit 0
  fi
  here="$(cd "$(dirname "$0")" && pwd)"
  nohup nice -n 19 "$here/phase.sh" "bg:$target" "$make" --no-print-directory "$target" >"$log" 2>&1 &
  echo $! >"$pidfile"
  echo "tools: building $target in the background (pid $!, log $log)"
  ;;
wait)
  if [ -s "$pidfile" ]; then
    pid="$(cat "$pidfile")"
    while kill -0 "$pid" 2>/dev/null; do sleep 2; done
    rm -f "$pidfile"
    if grep -q "^==> phase bg:$target: FAILED" "$log" 2>/dev/null; then
      echo "tools: the background build failed; its log:" >&2
      tail -n 40 "$log" >&2
    fi
  fi
  "$make" --no-print-directory "$target"
  ;;
*)
  echo "usage: $0 start|wait TARGET" >&2
  exit 2
  ;;
esac
