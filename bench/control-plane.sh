#!/usr/bin/env bash
# Benchmark: kiln-scheduler throughput (1 000 fake nodes, 10 000 pending pods, from the scheduler's start
# to the last binding seen on a watch) and kiln-controller-manager reaction (a ReplicaSet pod deleted →
# its replacement created), on the real components in-process over kiln-store (release) + kiln-apiserver
# on 127.0.0.1, once over etcd 3.4 and once over kiln-store. Anchor: kube-scheduler's published throughput (a few hundred pods/s; 300 used for the
# ratio) — kube-scheduler does not install here.
#   bench/control-plane.sh [NODES] [PODS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
NODES=${1:-1000} PODS=${2:-10000} ROUNDS=${3:-50}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
R=${BIN_DIR:-$CARGO_TARGET_DIR/release}
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
printf '%-44s %10s %10s %8s   %s\n' metric kiln anchor ratio goal
# The same scheduler and controllers over both stores the harness can start: etcd 3.4 (the store the
# components' goals are about) and kiln-store (kiln's own; its latency is the store's benchmark's business).
for store in /usr/bin/etcd "$R/kiln-store"; do
  name=$(basename "$store")
  s=$(KILN_TEST_STORE_BIN=$store "$R/kiln-bench" scheduler --nodes "$NODES" --pods "$PODS")
  r=$(KILN_TEST_STORE_BIN=$store "$R/kiln-bench" reaction --rounds "$ROUNDS")
  pps=$(field "$s" pods_per_second)
  printf '%-44s %10.0f %10s %8.2f   %s\n' "scheduler pods/s ($NODES nodes, $PODS pods; $name)" "$pps" 300 \
    "$(awk -v k="$pps" 'BEGIN {print k / 300}')" ">= 1000/s"
  printf '%-44s %10.1f %10s %8s   %s\n' "controller reaction p50 ms ($name)" "$(field "$r" p50_ms)" - - ""
  printf '%-44s %10.1f %10s %8s   %s\n' "controller reaction p99 ms ($ROUNDS; $name)" "$(field "$r" p99_ms)" - - "<= 100 ms"
done
