#!/usr/bin/env bash
# Benchmark: wall time of `kiln init` from hosts ready for SSH to every node Ready (1 controller + 2 workers,
# and 1 + 9), on a fresh lab each round. The anchors (kubeadm ≈ 50 s for one node, k0sctl ≈ 2 min for two)
# cannot be installed on this machine kind, so their published figures are printed beside kiln's as ratios.
#   bench/bootstrap.sh [ROUNDS]
# kiln and the component binaries it pushes are the release build (BIN_DIR=…/debug measures what the
# README's demo pushes instead).
# KILN=path overrides the kiln binary (e.g. the debug build, to skip the release build).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
if [ -z "${KILN:-}" ]; then
  # The whole workspace, as every bench builds it: one feature resolution, nothing built twice.
  cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
  KILN=$CARGO_TARGET_DIR/release/kiln
fi
BIN_DIR=${BIN_DIR:-$CARGO_TARGET_DIR/release}
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

round() { # hosts -> seconds
  local n=$1 t0 t1
  "$KILN" lab down --name bboot >/dev/null 2>&1 || true
  "$KILN" lab up --name bboot --hosts "$n" >/dev/null
  t0=$(now)
  "$KILN" lab run --name bboot -- "$KILN" init -f /tmp/kiln-lab/bboot/cluster.yaml --bin-dir "$BIN_DIR" >/dev/null
  t1=$(now)
  "$KILN" lab down --name bboot >/dev/null
  echo "$t1 - $t0" | bc
}

printf '%-10s %10s %12s %8s   %s\n' hosts kiln anchor ratio goal
for spec in "3 50 10" "10 120 15"; do
  read -r n anchor goal <<<"$spec"
  times=(); for _ in $(seq "$ROUNDS"); do times+=("$(round "$n")"); done
  t=$(printf '%s\n' "${times[@]}" | median)
  printf '%-10s %9.2fs %11ss %8.2f   <= %s s\n' "1+$((n - 1))" "$t" "$anchor" "$(echo "$t / $anchor" | bc -l)" "$goal"
done
