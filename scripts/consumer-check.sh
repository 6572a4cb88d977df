#!/usr/bin/env bash
# consumer-check.sh checks that a user outside this repository can go get
# every module of it at VERSION (default v0.1.0) and build and run a program
# that imports cache, lock, middleware, stampedeprom, stampedeotel, gocronlock
# and compress, as docs/releasing.md asks before each release.
#
#   scripts/consumer-check.sh          # v0.1.0
#   scripts/consumer-check.sh v0.2.0
#
# 1. scripts/testdata/modproxy writes a file GOPROXY serving each module of
#    go.work, as the working tree has it, at VERSION (module zips made with
#    golang.org/x/mod/zip; nested go.mod files as they are, since a consumer
#    ignores their replace directives).
# 2. In a temporary module outside the repository, with GOWORK=off and
#    GOFLAGS=-mod=mod, it go gets each of the seven at VERSION through that
#    proxy (then the usual GOPROXY for everything else; only our modules skip
#    the checksum database), builds scripts/testdata/consumer and runs it
#    against a Redis 8 from scripts/provision.sh (else redis-server on PATH)
#    on a free loopback port, stopped at the end.
#
# A nested module that still requires the root at a version the proxy does
# not serve (v0.0.0-...) fails step 2. The temporary module uses a module
# cache of its own, filled from the usual one (a second file proxy) and
# removed at the end: a module cache is immutable by contract (the go
# command indexes what it holds by module and version), and each run serves
# the same version with new content. -trimpath keeps that cache's path out
# of the build cache's keys, so a second run compiles only what changed.
set -euo pipefail
version=${1:-v0.1.0}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

work=$(mktemp -d "${TMPDIR:-/tmp}/stampede-consumer.XXXXXX")
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
	# The module cache is read-only; go clean -modcache empties it.
	GOMODCACHE=$work/modcache go clean -modcache 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# 1. The proxy, from the modules go.work uses (". ./bench …").
modules=$(go work edit -json | sed -n 's/^.*"DiskPath": "\(.*\)".*$/\1/p')
(cd scripts/testdata/modproxy && GOWORK=off go run . -version "$version" -out "$work/proxy" $(for m in $modules; do echo "$root/$m"; done)) >/dev/null

# 2. The consumer module.
upstream=$(go env GOPROXY)
cache_dl=$(go env GOMODCACHE)/cache/download
export GOWORK=off GOFLAGS="-mod=mod -trimpath" GONOSUMDB=github.com/hotkv/stampede
export GOPROXY="file://$work/proxy,file://$cache_dl,$upstream"
export GOMODCACHE=$work/modcache
# Each module alone first, in a module of its own, as a user who needs only
# that one would: the consumer module's go get of them together would hide a
# nested module's requirement on a root version the proxy lacks (the newest
# requirement wins).
mods=(github.com/hotkv/stampede{/stampedeprom,/stampedeotel,/gocronlock,/compress,})
for m in "${mods[@]}"; do
	d=$work/get-${m##*/}
	mkdir "$d"
	echo "go get $m@$version"
	(cd "$d" && go mod init example.com/get >/dev/null 2>&1 && go get "$m@$version" >"$d/log" 2>&1) ||
		{ cat "$d/log" >&2; echo "consumer check: go get $m@$version failed" >&2; exit 1; }
done
mkdir "$work/consumer"
cp scripts/testdata/consumer/main.go "$work/consumer/"
cd "$work/consumer"
go mod init example.com/consumer >/dev/null 2>&1
echo "go get ${mods[*]/%/@$version}"
go get "${mods[@]/%/@$version}" >get.log 2>&1 || { cat get.log >&2; exit 1; }
go vet .
go build -o consumer .

# The server.
server=${STAMPEDE_REDIS8:-$(command -v redis-server || true)}
[ -n "$server" ] || { echo "consumer check: no Redis server (run scripts/provision.sh or install redis-server)" >&2; exit 1; }
while :; do
	port=$((10000 + RANDOM % 20000)) # below the ephemeral ports, which outgoing connections hold
	(echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null || break
done
"$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
	(echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
	sleep 0.05
done
REDIS_ADDR=127.0.0.1:$port ./consumer
echo "consumer check: ok"
