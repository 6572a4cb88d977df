#!/usr/bin/env bash
# test.sh provisions the servers the tests need (scripts/provision.sh) and
# runs the whole test suite with the race detector: the module, then the
# nested compare module (stampede next to other libraries). Extra
# arguments go to go test, e.g. scripts/test.sh -run TestLock -v
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(./scripts/provision.sh | tee /dev/stderr | grep '^export ')"
go test -race -timeout 15m "$@" ./...
cd compare && go test -race -timeout 5m "$@" ./...
