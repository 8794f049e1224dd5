#!/usr/bin/env bash
# Benchmark: store failover side by side — 3 kiln-store members against 3 etcd 3.4 members (Debian's), one
# member per lab host, the same flags for both (plain HTTP inside the lab network, heartbeat 100 ms, election
# 1 000 ms: etcd's defaults). A client that knows all three endpoints (etcdctl --endpoints m1,m2,m3, 1 s dial
# and command timeouts) puts one key after another; the leader's host is powered off (`kiln lab stop`: every
# process on it dies at once, its packets go nowhere); measured: power-off → completion of the first put
# started after it that succeeds. Rounds alternate kiln, etcd, kiln, etcd … on a fresh lab each time.
# Goal (issue #26): kiln ≤ 1.0× etcd. Printed: each round, then the medians and their ratio.
# Root. Only the lab network.   bench/store-failover.sh [ROUNDS]
# Env: BIN_DIR = release binaries; SHOW=1 prints each round's attempts around the power-off.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
BIN_DIR=${BIN_DIR:-$CARGO_TARGET_DIR/release}
KILN=$BIN_DIR/kiln
export ETCDCTL_API=3
LAB=${LAB:-bfail}
WORK=$(mktemp -d /var/tmp/kiln-bench-failover.XXXXXX)
LOOP=""
stop_loop() {
  if [ -n "$LOOP" ]; then kill "$LOOP" 2>/dev/null || true; wait "$LOOP" 2>/dev/null || true; fi
  LOOP=""
}
cleanup() {
  stop_loop
  "$KILN" lab down --name $LAB >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
now() { date +%s.%N; }
in_lab() { ip netns exec "kiln-lab-$LAB" "$@"; }
IPS=(10.250.0.11 10.250.0.12 10.250.0.13)
EPS=$(printf 'http://%s:2379,' "${IPS[@]}"); EPS=${EPS%,}
CLUSTER=$(for i in 1 2 3; do printf 'm%s=http://%s:2380,' $i "${IPS[$((i - 1))]}"; done); CLUSTER=${CLUSTER%,}

# start SYSTEM: one member per host, in the background on the host (its processes die with it).
start() {
  local sys=$1 bin
  case $sys in
    kiln) bin=$BIN_DIR/kiln-store ;;
    etcd) bin=/usr/bin/etcd ;;
  esac
  for i in 1 2 3; do
    local ip=${IPS[$((i - 1))]}
    "$KILN" lab ssh --name $LAB host$i -- "setsid nohup $bin --name m$i --data-dir /var/lib/bench-$sys \
      --listen-client-urls http://$ip:2379 --advertise-client-urls http://$ip:2379 \
      --listen-peer-urls http://$ip:2380 --initial-advertise-peer-urls http://$ip:2380 \
      --initial-cluster $CLUSTER --initial-cluster-state new \
      --heartbeat-interval 100 --election-timeout 1000 >/var/log/bench-$sys.log 2>&1 </dev/null &"
  done
  for _ in $(seq 300); do
    in_lab etcdctl --endpoints "$EPS" --dial-timeout=1s put /ready yes >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "$sys: the 3 members did not serve a put in 30 s" >&2
  "$KILN" lab ssh --name $LAB host1 -- "tail -20 /var/log/bench-$sys.log" >&2 || true
  exit 1
}

leader_host() {
  in_lab etcdctl --endpoints "$EPS" endpoint status -w json | python3 -c '
import json, sys
v = json.load(sys.stdin); lead = v[0]["Status"]["leader"]
ep = next(e["Endpoint"] for e in v if e["Status"]["header"]["member_id"] == lead)
print("host%d" % (int(ep.split(":")[1].rsplit(".", 1)[1]) - 10))'
}

# One line per attempt: "<ok|fail> <start> <end>".
put_loop() {
  local i=0
  while :; do
    local s e r=ok; s=$(now); i=$((i + 1))
    in_lab etcdctl --endpoints "$EPS" --dial-timeout=1s --command-timeout=1s put /failover/key "$i" >/dev/null 2>&1 || r=fail
    e=$(now); echo "$r $s $e"
  done
}

# round SYSTEM: prints the seconds from the power-off to the first successful put started after it.
round() {
  local sys=$1
  "$KILN" lab down --name $LAB >/dev/null 2>&1 || true
  "$KILN" lab up --name $LAB --hosts 3 --no-registry >/dev/null
  start "$sys"
  local leader; leader=$(leader_host)
  put_loop >"$WORK/$sys.attempts" & LOOP=$!
  sleep 3
  local t_stop; t_stop=$(now)
  "$KILN" lab stop --name $LAB "$leader" >/dev/null
  sleep 12
  stop_loop
  if [ -n "${SHOW:-}" ]; then # the attempts around the power-off, relative to it, for a diagnosis
    echo "$sys: leader $leader; attempts (result, start, end) relative to the power-off:" >&2
    awk -v t="$t_stop" '$3 >= t - 0.5 && $2 <= t + 6 {printf "  %s %+.3f %+.3f\n", $1, $2 - t, $3 - t}' "$WORK/$sys.attempts" >&2
  fi
  local before; before=$(awk -v t="$t_stop" '$1 == "ok" && $3 < t' "$WORK/$sys.attempts" | wc -l)
  [ "$before" -gt 0 ] || { echo "$sys: no put succeeded before the power-off" >&2; exit 1; }
  awk -v t="$t_stop" '$1 == "ok" && $2 >= t {printf "%.3f", $3 - t; found=1; exit} END {if (!found) print "none"}' \
    "$WORK/$sys.attempts"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "none"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
KILN_S="" ETCD_S=""
printf '%-8s %-6s %s\n' round system "power-off → first acknowledged put, s"
for r in $(seq "$ROUNDS"); do
  for sys in kiln etcd; do
    s=$(round $sys)
    printf '%-8s %-6s %s\n' "$r" "$sys" "$s"
    [ "$s" = none ] && continue
    case $sys in kiln) KILN_S="$KILN_S $s" ;; etcd) ETCD_S="$ETCD_S $s" ;; esac
  done
done
k=$(echo "$KILN_S" | median) e=$(echo "$ETCD_S" | median)
echo
printf '%-40s %10s %10s %8s   %s\n' metric "kiln s" "etcd s" ratio goal
printf '%-40s %10s %10s %8s   %s\n' "failover, median of $ROUNDS" "$k" "$e" \
  "$(awk -v k="$k" -v e="$e" 'BEGIN { if (e > 0 && k != "none") printf "%.2f", k / e; else print "-" }')" "<= 1.0"
echo "  kiln: $KILN_S"
echo "  etcd: $ETCD_S"
