#!/usr/bin/env bash
# fuzz.sh runs every fuzz target outside compare/ (today all in the library
# module) for FUZZTIME each (default 20s), one after another, from the
# repository root: go.work makes a package of any module reachable from
# there. Any crash fails the run and leaves the input under the package's
# testdata/fuzz for go test to replay.
#
# Go 1.26's fuzz coordinator can end a clean run with a bare "context
# deadline exceeded" at the -fuzztime boundary (golang/go#75804, fixed in
# Go 1.27). A failure that wrote no new input under testdata/fuzz and says
# only that is reported as that race and does not fail the run; any other
# failure, or any new failing input, does.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-20s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
inputs() { if [ -d "$1" ]; then find "$1" -type f | sort; fi; }
grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./compare/' | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
    echo "fuzz: $pkg $target for $t"
    corpus="$pkg/testdata/fuzz/$target"
    before=$(inputs "$corpus")
    if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg" >"$log" 2>&1; then
      tail -1 "$log"
      continue
    fi
    if [ "$(inputs "$corpus")" = "$before" ] && grep -q '^    context deadline exceeded$' "$log" \
      && [ "$(grep -c -- '^--- FAIL' "$log")" = 1 ]; then
      grep '^fuzz: elapsed' "$log" | tail -1
      echo "fuzz: $target: no failing input; the run ended with Go's fuzztime race (golang/go#75804), not a failure"
      continue
    fi
    cat "$log"
    exit 1
  done
done
