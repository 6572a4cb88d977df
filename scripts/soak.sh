#!/usr/bin/env bash
# soak.sh runs the soak's long form against a real Redis 8: it provisions
# the servers (scripts/provision.sh), starts the Redis >= 8.4 binary on a
# free loopback port with a temporary directory, runs go run
# ./robustness/soak for the given duration (default 5m) and stops the
# server. Arguments after the duration go to the soak, e.g.
#
#   scripts/soak.sh                    # 5 minutes, 4 workers
#   scripts/soak.sh 30m -workers 8 -seed 42 -json soak.json
#
# The exit status is the soak's: non-zero when an invariant failed.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5m}
[ $# -gt 0 ] && shift

eval "$(./scripts/provision.sh | grep '^export ')"
bin=$STAMPEDE_REDIS8
"$bin" --version >/dev/null

dir=$(mktemp -d)
pid=
stop() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap stop EXIT

ping() { # ping PORT: whether a server answers PING there
  local reply
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  read -r -t 1 reply <&3 || true
  exec 3>&-
  [[ $reply == +PONG* ]]
}

# A random high port; if it is taken the server exits at once (or another
# server answers, which the log shows), and the next attempt picks again.
for attempt in 1 2 3 4 5 6 7 8; do
  port=$((10000 + RANDOM % 20000)) # below the ephemeral ports, which outgoing connections hold
  ping "$port" && continue
  "$bin" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize no \
    --loglevel warning --logfile "$dir/server.log" &
  pid=$!
  for _ in $(seq 100); do
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    if ping "$port"; then break 2; fi
    sleep 0.05
  done
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=
done
[ -n "$pid" ] || { echo "soak.sh: could not start $bin" >&2; cat "$dir/server.log" >&2 || true; exit 1; }
echo "soak.sh: $("$bin" --version | awk '{print $1, $2, $3}') on 127.0.0.1:$port (pid $pid)" >&2

go run ./robustness/soak -duration "$duration" -redis "redis://127.0.0.1:$port" "$@"
