#!/usr/bin/env bash
# Benchmark: kiln-dns (release, its own process) against an authoritative anchor, side by side in one run.
# etcd 3.4 + a release kiln-apiserver (own processes) hold SERVICES Services in 4 namespaces (~70%
# ClusterIP with a named port, ~20% headless with 3 ready endpoints in a discovery.k8s.io/v1
# EndpointSlice, ~10% ExternalName); kiln-dns watches them and forwards out-of-zone names to the anchor
# (--upstream), caching them. Anchor: Debian's unbound 1.17 serving the SAME records from local-data
# (static local zones for cluster.local. and example.test., no recursion, no DNSSEC). Each server gets
# 2 threads on the same 2 vCPUs: unbound num-threads 2, kiln-dns TOKIO_WORKER_THREADS=2.
# Query mix (one file, the same for both): 45% ClusterIP A, 20% headless A, 10% ClusterIP SRV
# (_http._tcp), 5% headless SRV, 15% external A (kiln-dns: from its cache after the first query), 5%
# ExternalName CNAME. Every kind is first checked for a right answer on both servers.
# Measured, interleaved kiln, unbound, kiln, unbound: dnsperf 2.10 at full speed for SECONDS (queries/s,
# each server's CPU per query), then dnsperf -Q 5000 -v for SECONDS (every answer's latency as dnsperf
# timed it: p50/p99 are dnsperf's own numbers; this dnsperf has no latency histogram). Then 50 Services
# created through the API, one at a time: create sent → kiln-dns answers the ClusterIP (queried every
# 2 ms). RSS (VmRSS) after the load, at SERVICES and again at 10 000 Services (a second run).
# Goals: queries/s >= unbound's, p99 <= unbound's, create → resolvable p99 <= 100 ms, RSS <= 32 MiB at
# 10 000 Services.
# Published context: managed CoreDNS is sized at ~5 000 in-cluster queries/s per replica (Alibaba Cloud
# ACK docs), and CoreDNS memory ≈ (pods + services) / 1000 + 54 MB (coredns.io, "Scaling CoreDNS in
# Kubernetes Clusters"): ≈ 64 MB at 10 000 Services before any pod.
# Ratios are kiln / unbound: queries/s > 1 is faster, latency and RSS < 1 are better.
#   bench/dns.sh [SERVICES] [SECONDS]          (env: BIG=10000 the second run's Services, 0 skips it)
set -euo pipefail
cd "$(dirname "$0")/.."
SERVICES=${1:-1000} SECONDS_=${2:-10} BIG=${BIG:-10000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
if [ -z "${BIN_DIR:-}" ]; then
  # etcd is the store here, so kiln-store (rocksdb, ~20 min in release) is not needed
  pkgs=(-p kiln-dns -p kiln-apiserver -p kiln-bench)
  cargo build --release "${pkgs[@]}" >/dev/null 2>&1 || cargo build --release "${pkgs[@]}"
fi
R=${BIN_DIR:-$CARGO_TARGET_DIR/release}
run() {
  KILN_TEST_STORE_BIN=/usr/bin/etcd "$R/kiln-bench" dns --apiserver-bin "$R/kiln-apiserver" \
    --dns-bin "$R/kiln-dns" --services "$1" --seconds "$SECONDS_"
}
a=$(run "$SERVICES")
b=
if [ "$BIG" -gt 0 ] && [ "$BIG" != "$SERVICES" ]; then b=$(run "$BIG"); fi
get() { # json dotted.key [index]
  python3 -c "import json,sys
d=json.loads(sys.argv[1])
for k in sys.argv[2].split('.'):
    d=d[int(k)] if isinstance(d,list) else d[k]
print(d)" "$1" "$2"
}
num() { get "$@" | xargs printf '%.2f'; }
row() { # metric kiln anchor goal
  printf '%-46s %10s %10s %7s   %s\n' "$1" "$2" "$3" \
    "$(awk -v k="$2" -v a="$3" 'BEGIN {if (a + 0 > 0 && k != "-") printf "%.2f", k / a; else print "-"}')" "$4"
}
printf '%-46s %10s %10s %7s   %s\n' metric kiln unbound ratio goal
table() { # json
  local j=$1 n; n=$(get "$j" services)
  row "queries/s ($n svc, mean of 2 x ${SECONDS_} s)" "$(num "$j" kiln.qps)" "$(num "$j" unbound.qps)" ">= 1.0 (ratio)"
  row "  run 1" "$(num "$j" kiln.qps_runs.0)" "$(num "$j" unbound.qps_runs.0)" ""
  row "  run 2" "$(num "$j" kiln.qps_runs.1)" "$(num "$j" unbound.qps_runs.1)" ""
  row "  server CPU us per query (run 1)" "$(num "$j" kiln.cpu_us_per_query.0)" "$(num "$j" unbound.cpu_us_per_query.0)" ""
  row "  avg latency ms at full load (run 1)" "$(num "$j" kiln.loaded_avg_latency_ms.0)" "$(num "$j" unbound.loaded_avg_latency_ms.0)" ""
  local q; q=$(get "$j" latency_qps)
  row "latency p50 ms at $q q/s" "$(num "$j" kiln.p50_ms)" "$(num "$j" unbound.p50_ms)" ""
  row "latency p99 ms at $q q/s" "$(num "$j" kiln.p99_ms)" "$(num "$j" unbound.p99_ms)" "<= anchor (ratio <= 1)"
  row "latency p99.9 ms at $q q/s" "$(num "$j" kiln.p999_ms)" "$(num "$j" unbound.p999_ms)" ""
  row "create -> resolvable p50 ms" "$(num "$j" update.p50_ms)" - ""
  row "create -> resolvable p99 ms ($(get "$j" update.ops) creates)" "$(num "$j" update.p99_ms)" - "<= 100 ms"
  row "RSS MiB after the load ($n svc)" "$(num "$j" kiln.rss_loaded_mib)" "$(num "$j" unbound.rss_loaded_mib)" \
    "$([ "$n" -ge 10000 ] && echo '<= 32 MiB (CoreDNS ~64 MB)')"
  echo "  ($n svc: kiln-dns ready in $(num "$j" kiln_ready_ms) ms after start; API create of a Service p50 $(num "$j" update_write_p50_ms) ms;" \
    "lost queries kiln $(get "$j" kiln.lost) unbound $(get "$j" unbound.lost); rcodes kiln $(get "$j" kiln.rcodes) unbound $(get "$j" unbound.rcodes);" \
    "create timeouts $(get "$j" update_timeouts); threads kiln $(get "$j" kiln.threads) unbound $(get "$j" unbound.threads))"
  python3 -c "import json,sys
for k,c in json.loads(sys.argv[1])['checks'].items():
    for who in ('kiln','unbound'):
        if c[who+'_ok'] < c['checked']:
            print('  WRONG ANSWERS (%s) from %s: %d of %d right; first: %s' % (k, who, c[who+'_ok'], c['checked'], c[who+'_error']))" "$j"
}
table "$a"
if [ -n "$b" ]; then table "$b"; fi
echo "dnsperf: -c $(get "$a" clients) -T $(get "$a" dnsperf_threads), query file of $(get "$a" queries_in_file) lines; each server $(get "$a" server_threads) threads."
