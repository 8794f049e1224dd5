#!/usr/bin/env bash
# Benchmark: kiln-scheduler throughput (1 000 fake nodes, 10 000 pending pods, from the scheduler's start
# to the last binding seen on a watch) and kiln-controller-manager reaction (a ReplicaSet pod deleted →
# its replacement created), on the real components in-process over kiln-store (release) + kiln-apiserver
# on 127.0.0.1. Anchor: kube-scheduler's published throughput (a few hundred pods/s; 300 used for the
# ratio) — kube-scheduler does not install here.
#   bench/control-plane.sh [NODES] [PODS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000} PODS=${2:-10000} ROUNDS=${3:-50}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
R=${BIN_DIR:-$CARGO_TARGET_DIR/release}
# The harness starts this store binary (etcd flags) instead of /usr/bin/etcd.
export KILN_TEST_STORE_BIN=${KILN_TEST_STORE_BIN:-$R/kiln-store}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
s=$("$R/kiln-bench" scheduler --nodes "$NODES" --pods "$PODS")
r=$("$R/kiln-bench" reaction --rounds "$ROUNDS")
printf '%-34s %12s %12s %8s   %s\n' metric kiln anchor ratio goal
printf '%-34s %12.0f %12s %8.2f   %s\n' "scheduler pods/s ($NODES nodes, $PODS pods)" "$(field "$s" pods_per_second)" 300 \
  "$(awk -v k="$(field "$s" pods_per_second)" 'BEGIN {print k / 300}')" ">= 1000/s"
printf '%-34s %12.1f %12s %8s   %s\n' "controller reaction p50 ms" "$(field "$r" p50_ms)" - - ""
printf '%-34s %12.1f %12s %8s   %s\n' "controller reaction p99 ms ($ROUNDS)" "$(field "$r" p99_ms)" - - "<= 100 ms"
