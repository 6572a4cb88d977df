#!/usr/bin/env bash
# Runs the public HTTP cache test suite (third_party/cache-tests: the
# revision behind cache-tests.fyi, see its SOURCE.md) through
# examples/proxy — the middleware in front of httputil.ReverseProxy — and
# prints the suite's own classification of the results: required, optimal
# and check tests passed, the suite's published results of the same
# revision scored the same way, the score per group of tests, and every
# required or optimal test that did not pass.
#
#   scripts/cache-tests.sh             # shared-cache configuration (see below)
#   scripts/cache-tests.sh -defaults   # the middleware's defaults, as inside an application
#   scripts/cache-tests.sh -id freshness-max-age   # one test, with the requests and responses
#
# The shared-cache configuration (-shared: middleware.SharedOptions()) is what
# a shared cache in front of an origin is usually set to, and what the suite's
# published caches run with: only responses with explicit freshness are
# stored (Freshness.Explicit), or with a Last-Modified that gives them a tenth
# of its age, at most a day, as heuristic freshness (Freshness.Heuristic 0.1,
# RFC 9111 4.2.2), the origin's Surrogate-Control is honoured
# (SurrogateControl), responses with no-cache and a validator are stored to
# be revalidated on every use (RevalidateNoCache), a request's no-cache is
# honoured (AllowNoCache) and requests with cookies are cached
# (CacheRequestsWithCookies). Needs Node.js and npm (Debian: apt-get install
# nodejs npm) and Go; the suite's dependencies come from the npm registry
# once (npm i in a copy of the suite under $CACHE_TESTS_HOME). Redis comes
# from scripts/provision.sh if it ran (STAMPEDE_REDIS8), else redis-server
# on PATH, else the proxy's embedded server. Results go to
# ${CACHE_TESTS_OUT:-/tmp/stampede-cache-tests}.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
vendored=$root/third_party/cache-tests
revision=$(sed -n 's/^commit \([0-9a-f]*\) (\([0-9-]*\)).*$/\1 \2/p' "$vendored/SOURCE.md" | head -1)
out=${CACHE_TESTS_OUT:-/tmp/stampede-cache-tests}
mode=shared
id=
while [ $# -gt 0 ]; do
	case $1 in
	-defaults) mode=defaults ;;
	-id) id=$2; shift ;;
	*) echo "usage: $0 [-defaults] [-id test-id]" >&2; exit 2 ;;
	esac
	shift
done

for cmd in node npm go; do
	command -v $cmd >/dev/null || { echo "cache-tests: $cmd not found (Debian: apt-get install nodejs npm)" >&2; exit 1; }
done
# A copy of the suite, as its SOURCE.md says to run it: the vendored files
# (copied again whenever they change) and its dependencies.
suite=${CACHE_TESTS_HOME:-$HOME/.cache/stampede/cache-tests}
if ! diff -rq -x node_modules -x package-lock.json "$vendored" "$suite" >/dev/null 2>&1; then
	echo "cache-tests: copying the suite ($revision) to $suite" >&2
	rm -rf "$suite"
	mkdir -p "$suite"
	cp -r "$vendored/." "$suite/"
fi
if [ ! -d "$suite/node_modules/undici" ]; then
	echo "cache-tests: npm i in $suite" >&2
	(cd "$suite" && npm i --omit=dev --no-audit --no-fund --loglevel=error >&2)
fi

mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# free_port prints a loopback port nothing listens on, below the kernel's
# ephemeral range (a port an outgoing connection holds there cannot be
# bound: CI once lost the proxy's that way).
free_port() {
	local p low
	low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	while :; do
		p=$((10000 + RANDOM % (low - 10000)))
		(echo >/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
	done
}
# wait_port waits until something listens on port $1 (10 s at most).
wait_port() {
	for _ in $(seq 200); do
		(echo >/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
		sleep 0.05
	done
	echo "cache-tests: nothing listens on port $1" >&2
	return 1
}

redis_args=()
server=${STAMPEDE_REDIS8:-$(command -v redis-server || true)}
if [ -n "$server" ]; then
	rp=$(free_port)
	"$server" --port "$rp" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
	pids+=($!)
	wait_port "$rp"
	redis_args=(-redis "redis://127.0.0.1:$rp/0")
fi

op=$(free_port)
(cd "$suite" && npm_config_port=$op npm_config_protocol=http npm_config_pidfile="$out/origin.pid" \
	exec node --no-warnings test-engine/server/server.mjs >"$out/origin.log" 2>&1) &
pids+=($!)
wait_port "$op"

(cd "$root/examples" && go build -o "$out/proxy" ./proxy)
pp=$(free_port)
flags=(-origin "http://127.0.0.1:$op" -listen "127.0.0.1:$pp" -namespace "cache-tests-$$")
if [ $mode = shared ]; then
	flags+=(-shared)
else
	flags+=(-shared=false)
fi
"$out/proxy" "${flags[@]}" "${redis_args[@]}" >"$out/proxy.log" 2>&1 &
pids+=($!)
wait_port "$pp"

cd "$suite"
if [ -n "$id" ]; then
	npm_config_base="http://127.0.0.1:$pp" npm_config_id="$id" node --no-warnings test-engine/cli.mjs
	exit 0
fi
npm_config_base="http://127.0.0.1:$pp" npm_config_id= npm_package_config_id= node --no-warnings test-engine/cli.mjs >"$out/results-$mode.json"
echo "suite: http-tests/cache-tests $revision (third_party/cache-tests); configuration: $mode (${flags[*]:4})"
published=()
for f in results/*.json; do
	case $(basename "$f" .json) in chrome | firefox | safari) continue ;; esac # browsers: private caches
	published+=("$f")
done
node "$root/scripts/cache-tests-summary.mjs" "$suite" "$out/results-$mode.json" "${published[@]}"
