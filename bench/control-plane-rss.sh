#!/usr/bin/env bash
# Benchmark: resident memory of the whole control plane (kiln-store + kiln-apiserver + kiln-scheduler +
# kiln-controller-manager on the controller) of an idle 3-node lab cluster, release binaries, after the
# cluster has settled. Anchors (published, neither installs here): k0s's controller ≈ 510 MB, k3s's
# server ≈ 1.6 GB. Goal ≤ 100 MiB. Root.
#   bench/control-plane-rss.sh [SETTLE_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SETTLE=${1:-30}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
BIN_DIR=${BIN_DIR:-$CARGO_TARGET_DIR/release}
KILN=$BIN_DIR/kiln
LAB=brss
trap '"$KILN" lab down --name $LAB >/dev/null 2>&1 || true' EXIT
"$KILN" lab down --name $LAB >/dev/null 2>&1 || true
"$KILN" lab up --name $LAB --hosts 3 >/dev/null
"$KILN" lab run --name $LAB -- "$KILN" init -f /tmp/kiln-lab/$LAB/cluster.yaml --bin-dir "$BIN_DIR" >/dev/null
sleep "$SETTLE"
total=0
printf '%-26s %10s\n' process "RSS MiB"
for p in kiln-store kiln-apiserver kiln-scheduler kiln-controller-manager; do
  kib=$("$KILN" lab exec --name $LAB host1 -- sh -c "grep VmRSS /proc/\$(pgrep -o -f /usr/local/bin/$p)/status" | awk '{print $2}')
  printf '%-26s %10.1f\n' "$p" "$(awk -v k="$kib" 'BEGIN {print k / 1024}')"
  total=$((total + kib))
done
mib=$(awk -v k="$total" 'BEGIN {printf "%.1f", k / 1024}')
printf '%-26s %10s   anchors: k0s controller 510 MB (ratio %s), k3s server 1600 MB (ratio %s); goal <= 100 MiB\n' \
  "control plane total" "$mib" "$(awk -v m="$mib" 'BEGIN {printf "%.2f", m / 510}')" "$(awk -v m="$mib" 'BEGIN {printf "%.3f", m / 1600}')"
