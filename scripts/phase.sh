#!/usr/bin/env bash
# Runs one phase of the test suite and prints its wall time:
#   phase.sh NAME COMMAND [ARG...]
# With PHASE_LOG set, it also appends "NAME<TAB>STATUS<TAB>SECONDS" to that
# file; `phase.sh --summary FILE` prints such a file as a table with the total.
# Phases named bg:* ran behind the others (scripts/tools-background.sh): they
# are listed, marked, and left out of the total.
set -uo pipefail

duration() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

if [ "${1:-}" = "--summary" ]; then
  [ -s "${2:-}" ] || exit 0
  total=0
  echo "phase timings (wall clock):"
  while IFS=$'\t' read -r name status secs; do
    case "$name" in
    bg:*) printf '  %-22s %8s  %s (in the background, not in the total)\n' "$name" "$(duration "$secs")" "$status" ;;
    *)
      printf '  %-22s %8s  %s\n' "$name" "$(duration "$secs")" "$status"
      total=$((total + secs))
      ;;
    esac
  done <"$2"
  printf '  %-22s %8s\n' "total" "$(duration "$total")"
  exit 0
fi

name="$1"
shift
start=$(date +%s)
echo "==> phase $name: $*"
"$@"
rc=$?
secs=$(($(date +%s) - start))
status=ok
[ "$rc" -eq 0 ] || status="FAILED (exit $rc)"
echo "==> phase $name: $status in $(duration "$secs")"
if [ -n "${PHASE_LOG:-}" ]; then
  printf '%s\t%s\t%d\n' "$name" "$status" "$secs" >>"$PHASE_LOG"
fi
exit "$rc"
