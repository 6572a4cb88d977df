#!/usr/bin/env bash
# provision.sh installs the Redis-protocol servers the test suite runs against:
#
#   redis 7.0   Debian bookworm's redis-server package (system binary)
#   redis 8.x   newest >= 8.4 source in Debian experimental/sid, built here
#   valkey 9.x  newest >= 9.0 source in Debian sid/experimental, built here
#
# Built binaries are kept in $STAMPEDE_BIN (default ~/.cache/stampede/bin),
# outside the repository; nothing is committed and /etc/apt is never changed:
# the newer suites are read through a private apt configuration that only
# downloads source tarballs. The mirror is taken from the system's own apt
# sources. Running it again skips every step whose result is already there.
#
# It prints one line per step with its duration, and the environment
# variables the tests read (STAMPEDE_REDIS7, STAMPEDE_REDIS8, STAMPEDE_VALKEY).
set -euo pipefail

BIN=${STAMPEDE_BIN:-$HOME/.cache/stampede/bin}
WORK=${STAMPEDE_BUILD:-$HOME/.cache/stampede/build}
mkdir -p "$BIN" "$WORK"

# One run at a time: runs started together (test scripts side by side in
# several checkouts) would otherwise build in the same source tree at once
# and break each other's builds. A later run waits, then finds the
# binaries built and skips.
exec 9>"$WORK/.lock"
flock 9

step() { # step NAME CMD...: runs CMD, prints NAME and how long it took
  local name=$1 t0 rc=0; shift
  t0=$(date +%s.%N)
  echo "provision: $name ..."
  "$@" || rc=$?
  printf 'provision: %s %s in %.1fs\n' "$name" "$([ $rc = 0 ] && echo done || echo FAILED)" \
    "$(echo "$(date +%s.%N) - $t0" | bc)"
  return $rc
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi; }

works() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

# --- tools the build needs -------------------------------------------------
need_pkgs=()
for p in bc:bc make:make gcc:gcc pkg-config:pkg-config; do
  command -v "${p%%:*}" >/dev/null || need_pkgs+=("${p#*:}")
done
if ! works /usr/bin/redis-server; then need_pkgs+=(redis-server); fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "provision: apt-get install ${need_pkgs[*]}"
  # policy-rc.d keeps the package's own service from starting on 6379.
  as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >/dev/null \
    || { as_root apt-get update -q >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >/dev/null; }
fi
echo "provision: redis 7: $(/usr/bin/redis-server --version | awk '{print $3}')"

# --- private apt configuration for source packages -------------------------
mirror() { # the Debian mirror the system already uses
  local m
  m=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list 2>/dev/null \
      | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ')
  echo "${m%/}"
}

APTC=$WORK/apt
APT=(-o Dir::Etc::sourcelist="$APTC/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$APTC/lists"
     -o Dir::Cache="$APTC/cache" -o APT::Sandbox::User=root -q)

apt_update() {
  local m; m=$(mirror)
  [ -n "$m" ] || { echo "provision: no Debian mirror in the system's apt sources" >&2; return 1; }
  mkdir -p "$APTC/lists/partial" "$APTC/cache/archives/partial"
  cat >"$APTC/sources.list" <<SRC
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $m sid main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $m experimental main
SRC
  apt-get "${APT[@]}" update >/dev/null
}

newest() { # newest NAME MIN: newest source version of NAME that is >= MIN
  apt-cache "${APT[@]}" showsrc "$1" 2>/dev/null | awk '/^Version:/{print $2}' | sort -uV \
    | while read -r v; do dpkg --compare-versions "$v" ge "$2" && echo "$v"; done | tail -1
}

build() { # build NAME MIN PREFIX: fetch the newest source >= MIN and build PREFIX-server and PREFIX-cli
  local name=$1 min=$2 prefix=$3 ver src orig
  ver=$(newest "$name" "$min")
  [ -n "$ver" ] || { echo "provision: no $name source >= $min" >&2; return 1; }
  echo "provision: $name source $ver"
  src=$WORK/$name-$ver
  mkdir -p "$src/dl"
  (cd "$src/dl" && [ -n "$(ls ./*.orig.tar.* 2>/dev/null)" ] || apt-get "${APT[@]}" source --download-only "$name=$ver" >/dev/null)
  orig=$(ls "$src"/dl/*.orig.tar.* | head -1)
  rm -rf "$src/tree" && mkdir -p "$src/tree"
  tar -xf "$orig" -C "$src/tree" --strip-components=1
  make -C "$src/tree" -j"$(nproc)" BUILD_TLS=no MALLOC=libc USE_SYSTEMD=no OPTIMIZATION=-O2 >"$src/build.log" 2>&1 \
    || { tail -30 "$src/build.log" >&2; return 1; }
  cp "$src/tree/src/$prefix-server" "$BIN/$name-server.new" && mv "$BIN/$name-server.new" "$BIN/$name-server"
  cp "$src/tree/src/$prefix-cli" "$BIN/$name-cli.new" && mv "$BIN/$name-cli.new" "$BIN/$name-cli"
  rm -rf "$src/tree"
}

if ! works "$BIN/redis-server" || ! works "$BIN/valkey-server"; then
  step "apt source lists (sid, experimental)" apt_update
fi
works "$BIN/redis-server" || step "build redis >= 8.4" build redis 8.4 redis
works "$BIN/valkey-server" || step "build valkey >= 9.0" build valkey 9.0 valkey
echo "provision: redis 8: $("$BIN/redis-server" --version | awk '{print $3}')"
echo "provision: valkey: $("$BIN/valkey-server" --version | awk '{print $3}')"

cat <<ENV
export STAMPEDE_REDIS7=/usr/bin/redis-server
export STAMPEDE_REDIS8=$BIN/redis-server
export STAMPEDE_VALKEY=$BIN/valkey-server
ENV
