#!/usr/bin/env bash
# Benchmark: kiln-proxy sync time with SERVICES Services × ENDPOINTS ready endpoints — cold start (process
# start → the nftables table holding every object) and one EndpointSlice change (update written → the rules
# holding it, read off kiln-proxy's /metrics: kiln_proxy_rules_synced_{resource_version,timestamp_seconds}),
# p50/p99 over ROUNDS isolated changes, each also checked in the kernel. kiln-store (release) + kiln-apiserver
# run in-process on 127.0.0.1 and the release kiln-proxy beside them, all inside a network namespace made for
# the run (kbench-proxy-PID, deleted on exit), so no rule touches this machine's own.
# Anchor, same run, same namespace: `nft -f` alone of the same full table (into an empty namespace) and of
# the same one-change update batches — the kernel's floor. Goal: one change applied ≤ 100 ms. Root.
#   bench/proxy-sync.sh [SERVICES] [ENDPOINTS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SERVICES=${1:-1000} ENDPOINTS=${2:-10} ROUNDS=${3:-50}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
R=${BIN_DIR:-$CARGO_TARGET_DIR/release}
NS=kbench-proxy-$$
trap 'ip netns del "$NS" 2>/dev/null || true' EXIT
ip netns add "$NS"
ip -n "$NS" link set lo up
out=$(KILN_TEST_STORE_BIN=$R/kiln-store ip netns exec "$NS" "$R/kiln-bench" proxy-sync \
  --proxy-bin "$R/kiln-proxy" --services "$SERVICES" --endpoints "$ENDPOINTS" --rounds "$ROUNDS")
get() { python3 -c "import json,sys; d=json.loads(sys.argv[1])
for k in sys.argv[2].split('.'): d=d[k]
print(d)" "$out" "$1"; }
row() { # metric kiln anchor goal
  printf '%-42s %9.1f %9.1f %8.2f   %s\n' "$1" "$2" "$3" "$(awk -v k="$2" -v a="$3" 'BEGIN {print k / a}')" "$4"
}
printf '%-42s %9s %9s %8s   %s\n' metric kiln anchor ratio goal
row "full sync ms ($SERVICES svc x $ENDPOINTS ep, cold start)" "$(get full_sync_ms)" "$(get nft_full_ms)" ""
row "one change p50 ms" "$(get change.p50_ms)" "$(get nft_change.p50_ms)" ""
row "one change p99 ms ($ROUNDS changes)" "$(get change.p99_ms)" "$(get nft_change.p99_ms)" "<= 100 ms"
echo "anchors: nft -f of the whole table (full sync), of the same one-change update batch (one change)."
ms() { get "$1" | xargs printf '%.1f'; }
echo "inside kiln's times: cold, the proxy spent $(ms full_sync_proxy_ms) ms syncing (nft $(ms full_sync_nft_ms)), the rest starting and listing; per change" \
  "$(ms change_sync_p50_ms) ms p50 (nft $(ms change_nft_p50_ms)); API write p50 $(ms change_write_p50_ms) ms;" \
  "whole-table replaces during the changes: $(get change_full_replaces); one change p99 / whole-table nft -f =" \
  "$(awk -v k="$(get change.p99_ms)" -v a="$(get nft_full_ms)" 'BEGIN {printf "%.3f", k / a}')"
