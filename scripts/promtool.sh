#!/usr/bin/env bash
# promtool.sh checks stampedeprom's Prometheus rules with promtool: the
# syntax (promtool check rules), their unit tests (promtool test rules)
# and, when go is installed, a real scrape of the Metrics (promtool check
# metrics on what TestRules_metrics gathers). It exits non-zero if any
# check fails.
#
# Without promtool on PATH it installs Debian's prometheus package, which
# holds promtool (as root only). The package's server is not started: a
# policy-rc.d refuses every service start during the install, and a
# server that runs anyway is stopped through its service.
set -euo pipefail
cd "$(dirname "$0")/.."
rules=stampedeprom/rules/stampede.rules.yml
tests=stampedeprom/rules/stampede.rules.test.yml

install_promtool() {
  if [ "$(id -u)" != 0 ]; then
    echo "promtool.sh: promtool is not on PATH; install Debian's prometheus package as root, or another promtool" >&2
    exit 1
  fi
  local policy=/usr/sbin/policy-rc.d made=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/promtool.sh: no service starts while it installs prometheus\nexit 101\n' >"$policy"
    chmod +x "$policy"
    made=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # --no-install-recommends: not the node exporter, another service.
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } ||
    { [ -n "$made" ] && rm -f "$policy"; exit 1; }
  [ -n "$made" ] && rm -f "$policy"
  # Only promtool is wanted: stop the server if it was started after all.
  if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
    systemctl stop prometheus
  elif command -v service >/dev/null && service prometheus status >/dev/null 2>&1; then
    service prometheus stop >/dev/null
  fi
}

command -v promtool >/dev/null || install_promtool
promtool --version 2>&1 | head -n 1

promtool check rules "$rules"
promtool test rules "$tests"

if command -v go >/dev/null; then
  scrape=$(mktemp)
  trap 'rm -f "$scrape"' EXIT
  (cd stampedeprom && STAMPEDEPROM_SCRAPE="$scrape" GOWORK=off go test -count=1 -run '^TestRules_metrics$' .) >/dev/null
  [ -s "$scrape" ] || { echo "promtool.sh: TestRules_metrics wrote no scrape" >&2; exit 1; }
  echo "promtool check metrics: $(grep -c "^stampede_" "$scrape") stampede samples"
  promtool check metrics <"$scrape"
fi
echo "promtool.sh: ok"
