#!/usr/bin/env bash
# Benchmark: custom resources against ConfigMaps on one kiln-apiserver (release, its own process, over
# etcd 3.4), same run: COUNT sequential creates of each (p50/p99 per request; a CR is pruned,
# defaulted and validated against its schema and a CEL rule) and a LIST of all COUNT (median of 3).
# Goal (issue 24): CR latency within 1.5x of the ConfigMap's; one validating webhook (allow-all, HTTPS on
# 127.0.0.1) adds <= 2 ms p50 over the webhook's own time. Printed as ratios; these machines are
# noisy, so run it more than once and read ranges.
#   bench/crds.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-10000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release -p kiln-apiserver -p kiln-bench >/dev/null 2>&1 || cargo build --release -p kiln-apiserver -p kiln-bench
R=${BIN_DIR:-$CARGO_TARGET_DIR/release}
out=$(KILN_TEST_STORE_BIN=/usr/bin/etcd "$R/kiln-bench" crds --apiserver-bin "$R/kiln-apiserver" --count "$COUNT")
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
rows = [("create p50, ms", "configmap_create_p50_ms", "cr_create_p50_ms"),
        ("create p99, ms", "configmap_create_p99_ms", "cr_create_p99_ms"),
        (f"LIST {r['count']}, ms", "configmap_list_ms", "cr_list_ms")]
print(f"{'metric':<22}{'ConfigMap':>12}{'custom resource':>18}{'ratio':>8}   goal")
for name, cm, cr in rows:
    ratio = r[cr] / r[cm] if r[cm] else float('nan')
    print(f"{name:<22}{r[cm]:>12.2f}{r[cr]:>18.2f}{ratio:>8.2f}   <= 1.5x")
added = r["webhook_create_p50_ms"] - r["configmap_create_p50_ms"] - r["webhook_own_p50_ms"]
print(f"one validating webhook: create p50 {r['webhook_create_p50_ms']:.2f} ms, p99 {r['webhook_create_p99_ms']:.2f} ms; "
      f"the webhook's own p50 {r['webhook_own_p50_ms']:.3f} ms; added by kiln p50 {added:.2f} ms (goal <= 2 ms)")
PY
