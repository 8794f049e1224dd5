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
#   bench/dns.sh [SERVICES] [SECONDS]          (env: BIG=10000 Services in the second run, 0 skips it;
#                                                 UPDATES=50 Services created one at a time)
set -euo pipefail
cd "$(dirname "$0")/.."
SERVICES=${1:-1000} SECONDS_=${2:-10} BIG=${BIG:-10000} UPDATES=${UPDATES:-50}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
if [ -z "${BIN_DIR:-}" ]; then
  # etcd is the store here, so kiln-store (rocksdb, ~20 min in release) is not needed
  pkgs=(-p kiln-dns -p kiln-apiserver -p kiln-bench)
  cargo build --release "${pkgs[@]}" >/dev/null 2>&1 || cargo build --release "${pkgs[@]}"
fi
R=${BIN_DIR:-$CARGO_TARGET_DIR/release}
run() {
  KILN_TEST_STORE_BIN=/usr/bin/etcd "$R/kiln-bench" dns --apiserver-bin "$R/kiln-apiserver" \
    --dns-bin "$R/kiln-dns" --services "$1" --seconds "$SECONDS_" --updates "$UPDATES"
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
num() { get "$1" "$2" | xargs printf "%.${3:-2}f"; }
row() { # metric kiln anchor goal
  printf '%-46s %10s %10s %7s   %s\n' "$1" "$2" "$3" \
    "$(awk -v k="$2" -v a="$3" 'BEGIN {if (a + 0 > 0 && k != "-") printf "%.2f", k / a; else print "-"}')" "$4"
}
both() { # metric json key decimals goal
  row "$1" "$(num "$2" "kiln.$3" "$4")" "$(num "$2" "unbound.$3" "$4")" "$5"
}
codes() { python3 -c "import json,sys; print(' '.join('%s %d' % kv for kv in json.loads(sys.argv[1])[sys.argv[2]]['rcodes'].items()))" "$1" "$2"; }
wrong() {
  python3 -c "import json,sys
for k,c in json.loads(sys.argv[1])['checks'].items():
    for who in ('kiln','unbound'):
        if c[who+'_ok'] < c['checked']:
            print('  WRONG ANSWERS (%s) from %s: %d of %d right; first: %s' % (k, who, c[who+'_ok'], c['checked'], c[who+'_error']))" "$1"
}
info() { # json
  echo "  ($(get "$1" services) svc: kiln-dns ready $(num "$1" kiln_ready_ms 0) ms after its start; API create p50 / p99 $(num "$1" update_write_p50_ms 1) / $(num "$1" update_write_p99_ms 1) ms;" \
    "create timeouts $(get "$1" update_timeouts); lost queries kiln $(get "$1" kiln.lost), unbound $(get "$1" unbound.lost);" \
    "rcodes kiln $(codes "$1" kiln), unbound $(codes "$1" unbound); threads kiln $(num "$1" kiln.threads 0), unbound $(num "$1" unbound.threads 0))"
  wrong "$1"
}
L=$(get "$a" latency_qps)
printf '%-46s %10s %10s %7s   %s\n' metric kiln unbound ratio goal
both "queries/s ($SERVICES svc, mean of 2 x ${SECONDS_} s)" "$a" qps 0 ">= 1.0 (ratio)"
printf '%-46s %10s %10s\n' "  queries/s run 1 / run 2 (kiln; unbound)" "$(num "$a" kiln.qps_runs.0 0) / $(num "$a" kiln.qps_runs.1 0);" \
  "$(num "$a" unbound.qps_runs.0 0) / $(num "$a" unbound.qps_runs.1 0)"
both "  server CPU us per query (run 1)" "$a" cpu_us_per_query.0 1 ""
both "  dnsperf avg latency ms, full load (run 1)" "$a" loaded_avg_latency_ms.0 3 ""
both "latency p50 ms at $L q/s" "$a" p50_ms 3 ""
both "latency p99 ms at $L q/s" "$a" p99_ms 3 "<= anchor (ratio <= 1)"
both "latency p99.9 ms at $L q/s" "$a" p999_ms 3 ""
row "create -> resolvable p50 ms" "$(num "$a" update.p50_ms 1)" - ""
row "create -> resolvable p99 ms ($(get "$a" update.ops) creates)" "$(num "$a" update.p99_ms 1)" - "<= 100 ms"
row "  of it after the API's answer, p50 / p99 ms" "$(num "$a" update_after_write.p50_ms 1) / $(num "$a" update_after_write.p99_ms 1)" - ""
both "RSS MiB after the load ($SERVICES svc)" "$a" rss_loaded_mib 1 ""
info "$a"
if [ -n "$b" ]; then
  both "queries/s ($BIG svc)" "$b" qps 0 ">= 1.0 (ratio)"
  both "latency p99 ms at $L q/s ($BIG svc)" "$b" p99_ms 3 "<= anchor (ratio <= 1)"
  row "create -> resolvable p99 ms ($BIG svc)" "$(num "$b" update.p99_ms 1)" - "<= 100 ms"
  row "  of it after the API's answer, p50 / p99 ms" "$(num "$b" update_after_write.p50_ms 1) / $(num "$b" update_after_write.p99_ms 1)" - ""
  both "RSS MiB after the load ($BIG svc)" "$b" rss_loaded_mib 1 "<= 32 MiB (CoreDNS formula: ~64 MB)"
  info "$b"
fi
echo "dnsperf: -c $(get "$a" clients) -T $(get "$a" dnsperf_threads), query file of $(get "$a" queries_in_file) lines; each server $(get "$a" server_threads) threads."
