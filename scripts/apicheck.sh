#!/usr/bin/env bash
# apicheck.sh checks the exported API of the modules users import against
# the reviewed baseline in api/, and writes that baseline with -w
# (docs/releasing.md#the-api-check).
#
#   scripts/apicheck.sh       # check; .ci/run runs this
#   scripts/apicheck.sh -w    # write api/*.txt anew from the working tree
#
# The modules: the root (cache, loader, lock, middleware, metrics,
# metrics/metricstest) and compress, gocronlock, stampedeprom and
# stampedeotel, one api/NAME.txt each. Not compare, examples, bench,
# robustness or soak: tools and tests, whose API may change in any release.
# Each module is loaded on its own go.mod (GOWORK=off; the nested ones reach
# the root through their replace directive) by scripts/testdata/apicheck,
# a module of its own that uses golang.org/x/exp/apidiff.
#
# The check fails when a module's API differs from api/NAME.txt, printing
# each line removed or added and apidiff's verdict on each change
# (compatible or not) from the source of the last commit that changed api/.
# Once a release tag vX.Y.Z exists, it also fails when a package's lines
# differ from that tag's api/ and CHANGELOG.md's newest section ("##
# Unreleased", or the release's own in the commit that makes it) has no
# "###" heading naming the package.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
modules=(. compress gocronlock stampedeprom stampedeotel)
case "${1:-}" in
-w | "") ;;
*) echo "usage: scripts/apicheck.sh [-w]" >&2; exit 2 ;;
esac
cd "$root/scripts/testdata/apicheck"
GOWORK=off go run . -root "$root" "$@" "${modules[@]}"
