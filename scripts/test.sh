#!/usr/bin/env bash
# test.sh provisions the servers the tests need (scripts/provision.sh) and
# runs the whole test suite with the race detector, one module at a time:
# every module go.work uses, in its order, the library (the root module)
# first. The list is read from go.work, so a module added there is tested
# too. go test ./... covers only the module it runs in, hence the loop.
#
# Each module is tested on its own go.mod and go.sum (GOWORK=off), as it
# builds outside this repository; the nested ones reach the library here
# through their replace directive. A failing module does not stop the
# others; the script exits non-zero if any failed. Extra arguments go to
# every go test, e.g. scripts/test.sh -run TestLock -v
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(./scripts/provision.sh | tee /dev/stderr | grep '^export ')"

# The modules go.work uses, as it spells them: ". ./bench …".
modules=$(go work edit -json | sed -n 's/^.*"DiskPath": "\(.*\)".*$/\1/p')
failed=()
for m in $modules; do
  timeout=15m
  [ "$m" = ./compare ] && timeout=5m
  echo "test.sh: module $m" >&2
  (cd "$m" && GOWORK=off go test -race -timeout "$timeout" "$@" ./...) || failed+=("$m")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: FAIL in ${failed[*]}" >&2
  exit 1
fi
