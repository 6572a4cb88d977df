#!/usr/bin/env bash
# test-under-load.sh runs the timing-sensitive tests (lock, cache,
# middleware, compare and examples) while busy-loop processes keep the
# CPUs taken, as a shared CI machine is: the suite must pass when the
# scheduler is slow, because its time bounds scale with the delay it
# measures, not with a guess. Nothing is excused by this script; it only
# adds load.
#
#   scripts/test-under-load.sh                 # two hogs, the five packages
#   HOGS=4 scripts/test-under-load.sh -run TestDo_faults -v
#
# Extra arguments go to every go test, after -count=1 (a result go test
# cached from an idle run would say nothing about this one; a -count of
# your own wins). The exit status is non-zero when any package failed.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(./scripts/provision.sh | grep '^export ')"
export CI=true

hogs=()
stop() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop EXIT
for _ in $(seq "${HOGS:-2}"); do
  (while :; do :; done) &
  hogs+=($!)
done
echo "test-under-load.sh: ${#hogs[@]} busy loops; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

failed=()
run() { # run DIR PKG...: go test in module DIR
  local dir=$1; shift
  echo "test-under-load.sh: $dir $*" >&2
  (cd "$dir" && GOWORK=off go test -race -timeout 20m "${args[@]}" "$@") || failed+=("$dir $*")
}
args=(-count=1 "$@")
run . ./lock/ ./cache/ ./middleware/
run ./compare ./...
run ./examples ./...
echo "test-under-load.sh: load at the end $(cut -d' ' -f1-3 /proc/loadavg)" >&2
if [ ${#failed[@]} -gt 0 ]; then
  echo "test-under-load.sh: FAIL in ${failed[*]}" >&2
  exit 1
fi
