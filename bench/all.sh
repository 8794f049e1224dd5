#!/usr/bin/env bash
# Every benchmark of the project in one run (release build), kiln against its anchors with ratios, written
# with a description of the machine to docs/benchmarks.md (and printed). Root. Takes ~15 minutes.
#   bench/all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
export BIN_DIR=$CARGO_TARGET_DIR/release KILN=$CARGO_TARGET_DIR/release/kiln
OUT=docs/benchmarks.md
tmp=$(mktemp)
section() { # title command...
  local title=$1; shift
  echo "== $title" >&2
  { echo "## $title"; echo; echo '```'; "$@" 2>&1 | grep -v '^{"level"' | tail -25; echo '```'; echo; } >>"$tmp"
}
{
  echo "# Benchmarks"
  echo
  echo "Written by \`bench/all.sh\` on $(date -u +%Y-%m-%d) — $(nproc) vCPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
  echo "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, kernel $(uname -r), $(. /etc/os-release; echo "$PRETTY_NAME"); kiln $(git rev-parse --short HEAD)."
  echo "Ratios are kiln / anchor. What each benchmark measures and its goal: bench/README.md."
  echo
} >"$tmp"
section "Lab hosts up and down (bench/lab.sh)" bench/lab.sh 1
section "Bootstrap (bench/bootstrap.sh)" bench/bootstrap.sh 1
section "Store vs etcd 3.4 (bench/store.sh 0.2)" bench/store.sh 0.2
section "Scheduler and controllers (bench/control-plane.sh)" bench/control-plane.sh
section "API server (bench/apiserver.sh)" bench/apiserver.sh
section "Pod start (bench/pod-start.sh)" bench/pod-start.sh
section "Workload controllers (bench/workloads.sh)" bench/workloads.sh
section "Proxy sync (bench/proxy-sync.sh)" bench/proxy-sync.sh
section "Cluster DNS (bench/dns.sh)" bench/dns.sh
section "Control-plane memory (bench/control-plane-rss.sh)" bench/control-plane-rss.sh
section "Day 2: snapshots and HA failover (bench/day2.sh)" bench/day2.sh
mv "$tmp" "$OUT"
cat "$OUT"
