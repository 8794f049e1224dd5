#!/usr/bin/env bash
# Benchmark: pod start latency on a real 3-host lab cluster (release binaries, image already on the nodes):
# 100 pods created at once, each from its binding seen to Running, p50/p99. Anchor: the CRI floor measured
# on this machine kind (containerd RunPodSandbox + CreateContainer + StartContainer ≈ 0.32 s median,
# ../shared/lab/NOTES.md); upstream's SLO is p99 ≤ 5 s from creation. Goal p99 ≤ 1 s. Root.
#   bench/pod-start.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-100}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
BIN_DIR=${BIN_DIR:-$CARGO_TARGET_DIR/release}
KILN=$BIN_DIR/kiln
LAB=bpod
trap '"$KILN" lab down --name $LAB >/dev/null 2>&1 || true' EXIT
"$KILN" lab down --name $LAB >/dev/null 2>&1 || true
"$KILN" lab up --name $LAB --hosts 3 >/dev/null
"$KILN" lab run --name $LAB -- "$KILN" init -f /tmp/kiln-lab/$LAB/cluster.yaml --bin-dir "$BIN_DIR" >/dev/null
ADMIN=/tmp/kiln-lab/$LAB/$LAB.kiln/admin.conf
# Image present on both workers first (the benchmark measures starts, not pulls).
"$KILN" lab run --name $LAB -- "$BIN_DIR/kiln-bench" pod-start --kubeconfig "$ADMIN" --count 4 >/dev/null
j=$("$KILN" lab run --name $LAB -- "$BIN_DIR/kiln-bench" pod-start --kubeconfig "$ADMIN" --count "$COUNT")
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
p50=$(field "$j" p50_ms) p99=$(field "$j" p99_ms)
printf '%-30s %10s %10s %8s   %s\n' metric kiln anchor ratio goal
printf '%-30s %10.0f %10s %8.2f   %s\n' "pod start p50 ms ($COUNT pods)" "$p50" 320 "$(awk -v k="$p50" 'BEGIN {print k / 320}')" ""
printf '%-30s %10.0f %10s %8.2f   %s\n' "pod start p99 ms ($COUNT pods)" "$p99" 320 "$(awk -v k="$p99" 'BEGIN {print k / 320}')" "<= 1000 ms"
