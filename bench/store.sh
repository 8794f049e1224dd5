#!/usr/bin/env bash
# Benchmark: kiln-store against etcd 3.4 (Debian etcd-server), side by side in one run: one member each on
# 127.0.0.1 with its data on the same disk, the same client (kiln-bench: etcd v3 gRPC, N clients over up to
# 16 connections, like etcd's `benchmark put/range`) and the same workload, also with auth enabled on both, and
# a snapshot of 100 000 keys saved and restored in etcd's format on both. Prints kiln/etcd ratios.
#   bench/store.sh [SCALE]   SCALE multiplies the request counts (default 1; 0.2 for a quick look)
# Not part of the tests. Release build. Only 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
R=${BIN_DIR:-$CARGO_TARGET_DIR/release}
export ETCDCTL_API=3
WORK=$(mktemp -d /var/tmp/kiln-bench-store.XXXXXX)
PID=""
stop() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  PID=""
}
trap 'stop; rm -rf "$WORK"' EXIT
n() { awk -v a="$1" -v s="$SCALE" 'BEGIN {v=int(a*s); print (v < 100 ? 100 : v)}'; }
CLIENT_PORT=23790 PEER_PORT=23800
EP=http://127.0.0.1:$CLIENT_PORT

start() { # system datadir
  local flags=(--name bench --data-dir "$2"
    --listen-client-urls "$EP" --advertise-client-urls "$EP"
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT"
    --initial-cluster "bench=http://127.0.0.1:$PEER_PORT" --quota-backend-bytes 8589934592)
  case $1 in
    etcd) etcd "${flags[@]}" >"$WORK/$1.log" 2>&1 & ;;
    kiln) "$R/kiln-store" "${flags[@]}" >"$WORK/$1.log" 2>&1 & ;;
  esac
  PID=$!
  for _ in $(seq 200); do
    etcdctl --endpoints "$EP" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "$1 did not become healthy; log:" >&2; tail -20 "$WORK/$1.log" >&2; exit 1
}

# Auth as etcd's docs enable it: root (with the root role), then a user with a role on /bench/.
auth_on() {
  local cmd
  for cmd in "user add root:root" "user grant-role root root" "role add bench" \
    "role grant-permission bench --prefix=true readwrite /bench/" "user add bench:bench" \
    "user grant-role bench bench" "auth enable"; do
    # shellcheck disable=SC2086 # each command is its words
    etcdctl --endpoints "$EP" $cmd >/dev/null
  done
}

field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
load() { "$R/kiln-bench" "$@" --endpoint "$EP"; }
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {print a - b}'; }
add() { awk -v a="$1" -v b="$2" 'BEGIN {print a + b}'; }

declare -A RES
run_system() { # system
  local s=$1 j t0 t1
  start "$s" "$WORK/$s-data"
  for c in 1 16 256; do
    local total; total=$(n $((c == 1 ? 5000 : (c == 16 ? 30000 : 60000))))
    j=$(load put --clients $c --total "$total" --value-size 256)
    RES[$s,put$c,tput]=$(field "$j" per_second); RES[$s,put$c,p50]=$(field "$j" p50_ms); RES[$s,put$c,p99]=$(field "$j" p99_ms)
  done
  for c in 1 16; do
    j=$(load range --clients $c --total "$(n $((c == 1 ? 10000 : 50000)))")
    RES[$s,range$c,tput]=$(field "$j" per_second); RES[$s,range$c,p50]=$(field "$j" p50_ms); RES[$s,range$c,p99]=$(field "$j" p99_ms)
  done
  # The same puts and ranges with auth enabled, as a user whose role grants readwrite on /bench/: every request
  # carries a simple token and passes the permission check (root's requests would skip it). Off again after.
  auth_on
  for c in 1 16; do
    j=$(load put --clients $c --total "$(n $((c == 1 ? 5000 : 30000)))" --value-size 256 --user bench:bench)
    RES[$s,aput$c,tput]=$(field "$j" per_second); RES[$s,aput$c,p99]=$(field "$j" p99_ms)
    j=$(load range --clients $c --total "$(n $((c == 1 ? 10000 : 50000)))" --user bench:bench)
    RES[$s,arange$c,tput]=$(field "$j" per_second); RES[$s,arange$c,p99]=$(field "$j" p99_ms)
  done
  etcdctl --endpoints "$EP" --user root:root auth disable >/dev/null
  # 100 000 keys x 1 KiB (sequential keys: a bulk load), then RSS, snapshot save, restore. The issue's size
  # at every SCALE: a snapshot of a fifth of it says little about one of the whole.
  load put --clients 64 --total 100000 --value-size 1024 --key-space 0 --key-prefix /snap/ >/dev/null
  RES[$s,rss]=$(awk '/VmRSS/ {print $2 / 1024}' "/proc/$PID/status")
  t0=$(now); etcdctl --endpoints "$EP" snapshot save "$WORK/$s.db" >/dev/null 2>&1; t1=$(now)
  RES[$s,save]=$(sub "$t1" "$t0")
  # Both files must be etcd's own snapshot format (bbolt + sha256): etcdctl reads and hashes every key.
  etcdctl snapshot status "$WORK/$s.db" >/dev/null 2>&1 ||
    { echo "$s's snapshot is not in etcd's format: $(etcdctl snapshot status "$WORK/$s.db" 2>&1)" >&2; exit 1; }
  RES[$s,snapmib]=$(stat -c %s "$WORK/$s.db" | awk '{print $1 / 1048576}')
  stop
  t0=$(now)
  case $s in
    etcd) etcdctl snapshot restore "$WORK/$s.db" --name bench --data-dir "$WORK/$s-restored" \
            --initial-cluster "bench=http://127.0.0.1:$PEER_PORT" \
            --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" >/dev/null 2>&1 ;;
    kiln) "$R/kiln-store" snapshot restore "$WORK/$s.db" --name bench --data-dir "$WORK/$s-restored" \
            --initial-cluster "bench=http://127.0.0.1:$PEER_PORT" \
            --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" >/dev/null 2>&1 ;;
  esac
  t1=$(now)
  RES[$s,restore]=$(sub "$t1" "$t0")
  rm -rf "$WORK/$s-data" "$WORK/$s-restored" "$WORK/$s.db"
}

# The floor under a 1-client put on this machine (kiln-bench store-floor, store_floor.rs): the same
# client and HTTP/2 stack, a Put that only appends, fdatasyncs and answers on the handler's thread.
# No store does less per put; one that also keeps its threads awake between puts (kiln-store's
# keep_awake.rs) no longer pays for waking them, so it can pass the floor.
run_floor() {
  "$R/kiln-bench" store-floor --listen "127.0.0.1:$CLIENT_PORT" --log "$WORK/floor.log" >"$WORK/floor.out" 2>&1 &
  PID=$!
  local up=""
  for _ in $(seq 200); do
    etcdctl --endpoints "$EP" endpoint health >/dev/null 2>&1 && { up=1; break; }
    sleep 0.05
  done
  [ -n "$up" ] || { echo "the store floor did not come up; log:" >&2; tail -20 "$WORK/floor.out" >&2; exit 1; }
  RES[floor,put1,tput]=$(field "$(load put --clients 1 --total "$(n 5000)" --value-size 256)" per_second)
  stop
  rm -f "$WORK/floor.log"
}

run_system etcd
run_floor
run_system kiln

ratio() { awk -v k="$1" -v e="$2" 'BEGIN { if (e > 0) printf "%.2f", k / e; else print "-" }'; }
printf '%-22s %12s %12s %8s   %s\n' metric kiln etcd ratio goal
row() { printf '%-22s %12.2f %12.2f %8s   %s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")" "$4"; }
for c in 1 16 256; do
  g=""; [ $c -le 16 ] && g=">= 1.5"
  row "put/s $c clients" "${RES[kiln,put$c,tput]}" "${RES[etcd,put$c,tput]}" "$g"
  row "put p50 ms $c" "${RES[kiln,put$c,p50]}" "${RES[etcd,put$c,p50]}" ""
  row "put p99 ms $c" "${RES[kiln,put$c,p99]}" "${RES[etcd,put$c,p99]}" "<= 1"
done
for c in 1 16; do
  row "range/s $c clients" "${RES[kiln,range$c,tput]}" "${RES[etcd,range$c,tput]}" ""
  row "range p99 ms $c" "${RES[kiln,range$c,p99]}" "${RES[etcd,range$c,p99]}" ""
done
for c in 1 16; do
  row "auth put/s $c clients" "${RES[kiln,aput$c,tput]}" "${RES[etcd,aput$c,tput]}" ">= 1.0"
  row "auth put p99 ms $c" "${RES[kiln,aput$c,p99]}" "${RES[etcd,aput$c,p99]}" ""
  row "auth range/s $c clients" "${RES[kiln,arange$c,tput]}" "${RES[etcd,arange$c,tput]}" ">= 1.0"
  row "auth range p99 ms $c" "${RES[kiln,arange$c,p99]}" "${RES[etcd,arange$c,p99]}" ""
done
row "snapshot file MiB" "${RES[kiln,snapmib]}" "${RES[etcd,snapmib]}" ""
row "snapshot save s" "${RES[kiln,save]}" "${RES[etcd,save]}" ""
row "snapshot restore s" "${RES[kiln,restore]}" "${RES[etcd,restore]}" ""
row "save+restore s" "$(add "${RES[kiln,save]}" "${RES[kiln,restore]}")" \
  "$(add "${RES[etcd,save]}" "${RES[etcd,restore]}")" "<= 0.5"
row "RSS MiB after load" "${RES[kiln,rss]}" "${RES[etcd,rss]}" "<= 1"
echo
echo "the floor under a 1-client put here (append + fdatasync + answer; no Raft, no state machine; its thread sleeps between puts):"
printf '%-22s %12.2f\n' "floor put/s 1 client" "${RES[floor,put1,tput]}"
printf '%-22s %12s   %s\n' "floor / etcd" "$(ratio "${RES[floor,put1,tput]}" "${RES[etcd,put1,tput]}")" \
  "the most a store whose threads sleep between puts can reach at 1 client here"
printf '%-22s %12s\n' "kiln / floor" "$(ratio "${RES[kiln,put1,tput]}" "${RES[floor,put1,tput]}")"
