#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the module for FUZZTIME each (default
# 20s), one after another; any crash fails the run and leaves the input
# under the package's testdata/fuzz for go test to replay.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-20s}
grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./compare/' | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
    echo "fuzz: $pkg $target for $t"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" "$pkg" >/tmp/fuzz-$$.log 2>&1 \
      || { cat /tmp/fuzz-$$.log; rm -f /tmp/fuzz-$$.log; exit 1; }
    tail -1 /tmp/fuzz-$$.log
  done
done
rm -f /tmp/fuzz-$$.log
