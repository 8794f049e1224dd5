#!/usr/bin/env bash
# Benchmark: what the Job and StatefulSet controllers add on top of starting pods, on a real 3-host lab
# (release binaries, image already on the workers), each beside its floor in the same run:
#   jobs        — COUNT Jobs of one short pod (`true`) each: jobs/s and created→Complete p50/p99, against
#                 the same COUNT pods created directly (created→Succeeded): the pod-start floor.
#                 Goal: jobs/s ≥ 0.8 × the floor's pods/s.
#   statefulset — an OrderedReady StatefulSet of REPLICAS scaled up from nothing until all are Ready,
#                 against REPLICAS single pods created one after another, each once the one before it
#                 runs. Goal: ≤ 1.2 × the floor's time.
# Root.   bench/workloads.sh [COUNT] [REPLICAS]
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-1000}
REPLICAS=${2:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
BIN_DIR=${BIN_DIR:-$CARGO_TARGET_DIR/release}
KILN=$BIN_DIR/kiln
LAB=bwork
trap '"$KILN" lab down --name $LAB >/dev/null 2>&1 || true' EXIT
"$KILN" lab down --name $LAB >/dev/null 2>&1 || true
"$KILN" lab up --name $LAB --hosts 3 >/dev/null
"$KILN" lab run --name $LAB -- "$KILN" init -f /tmp/kiln-lab/$LAB/cluster.yaml --bin-dir "$BIN_DIR" >/dev/null
ADMIN=/tmp/kiln-lab/$LAB/$LAB.kiln/admin.conf
bench() { "$KILN" lab run --name $LAB -- "$BIN_DIR/kiln-bench" "$@"; }
# Image present on both workers first (the benchmark measures controllers, not pulls).
bench pod-start --kubeconfig "$ADMIN" --count 4 >/dev/null
jobs=$(bench jobs --kubeconfig "$ADMIN" --count "$COUNT")
sts=$(bench statefulset --kubeconfig "$ADMIN" --replicas "$REPLICAS")
get() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); [d:=d[k] for k in sys.argv[2:]]; print(d)" "$@"; }
row() { # metric kiln anchor goal
  printf '%-40s %10.2f %10.2f %8.2f   %s\n' "$1" "$2" "$3" "$(awk -v k="$2" -v a="$3" 'BEGIN {print k / a}')" "$4"
}
printf '%-40s %10s %10s %8s   %s\n' metric kiln anchor ratio goal
row "$COUNT jobs: finished per second" "$(get "$jobs" jobs per_second)" "$(get "$jobs" floor per_second)" ">= 0.8"
row "$COUNT jobs: created→finished p50 ms" "$(get "$jobs" jobs p50_ms)" "$(get "$jobs" floor p50_ms)" ""
row "$COUNT jobs: created→finished p99 ms" "$(get "$jobs" jobs p99_ms)" "$(get "$jobs" floor p99_ms)" ""
row "statefulset of $REPLICAS: seconds to Ready" "$(get "$sts" statefulset_seconds)" "$(get "$sts" floor_seconds)" "<= 1.2"
echo "anchors: jobs — the same pods created directly (Succeeded); statefulset — $REPLICAS pods created one after another, each once the one before runs"
