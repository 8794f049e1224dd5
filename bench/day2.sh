#!/usr/bin/env bash
# Benchmark: day-2 operations on lab clusters (release binaries), side by side with etcd 3.4's own tools.
#  1. Snapshots, OBJECTS ConfigMaps (default 10 000) on a 1-controller lab cluster:
#     save    — `kiln snapshot save` (store snapshot + revision check + object record + PKI, packed and
#               hashed into one bundle) against `etcdctl snapshot save` from the same kiln-store member
#               (the same store and data, the snapshot file only);
#     restore — store data only: `kiln-store snapshot restore` of the bundle's snapshot against `etcdctl
#               snapshot restore` of an etcd 3.4 holding the same keys (copied with `etcdctl make-mirror`;
#               etcdctl cannot read kiln-store's snapshot format); and the whole `kiln snapshot restore`
#               (stop the control plane, restore, start, wait healthy, verify) against etcdctl restore +
#               etcd started on it until healthy (one member, no control plane: a lower bound, not a peer).
#     Goal: save and store-data restore ratio <= 1.
#  2. HA failover: 3 controllers + 1 worker; writes every few ms through a surviving member (etcdctl put)
#     and a surviving API server (kubectl create); the store leader's host is powered off (`kiln lab
#     stop`); time from the power-off to the first successful write started after it. Goal <= 5 s.
# Root. Only lab networks and the lab's own 127.0.0.1.
#   bench/day2.sh [OBJECTS] [ROUNDS]
# Environment: LAB / HALAB name the two labs (default bday2, bday2ha: set them when another run may be
# going); SKIP_HA=1 runs part 1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
OBJECTS=${1:-10000}
ROUNDS=${2:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
BIN_DIR=${BIN_DIR:-$CARGO_TARGET_DIR/release}
KILN=$BIN_DIR/kiln
export ETCDCTL_API=3
LAB=${LAB:-bday2} HALAB=${HALAB:-bday2ha}
WORK=$(mktemp -d /var/tmp/kiln-bench-day2.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  "$KILN" lab down --name $LAB >/dev/null 2>&1 || true
  "$KILN" lab down --name $HALAB >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a - b}'; }
min() { awk -v a="$1" -v b="$2" 'BEGIN {print (b == "" || a < b) ? a : b}'; }
in_lab() { local lab=$1; shift; ip netns exec "kiln-lab-$lab" "$@"; }
# timed VAR cmd...: VAR = min(VAR, seconds the command took); a failing command ends the benchmark.
timed() {
  local var=$1 t0 t1 s; shift
  t0=$(now)
  if ! "$@" >>"$WORK/log" 2>&1; then echo "failed: $*" >&2; tail -30 "$WORK/log" >&2; exit 1; fi
  t1=$(now); s=$(sub "$t1" "$t0")
  printf -v "$var" '%s' "$(min "$s" "${!var}")"
}

# ---------------------------------------------------------------- 1. snapshots
"$KILN" lab down --name $LAB >/dev/null 2>&1 || true
"$KILN" lab up --name $LAB --hosts 1 --no-registry >/dev/null
Y=/tmp/kiln-lab/$LAB/cluster.yaml
in_lab $LAB "$KILN" init -f $Y --bin-dir "$BIN_DIR" >>"$WORK/log" 2>&1
ADMIN=/tmp/kiln-lab/$LAB/$LAB.kiln/admin.conf
PKI=/tmp/kiln-lab/$LAB/$LAB.kiln/pki/host1
KC=(kubectl --kubeconfig "$ADMIN" --request-timeout=60s)
STORE=(etcdctl --endpoints https://10.250.0.11:2379 --cacert "$PKI/store/ca.crt"
  --cert "$PKI/apiserver-store-client.crt" --key "$PKI/apiserver-store-client.key" --command-timeout=300s)
in_lab $LAB "${KC[@]}" create namespace bench >/dev/null
# OBJECTS ConfigMaps (~300 B of data each) through the API, 8 kubectl processes in parallel.
python3 - "$WORK" "$OBJECTS" <<'EOF'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
for part in range(8):
    items = [{"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": f"cm-{i:05d}", "namespace": "bench"},
              "data": {"k": "v" * 300}} for i in range(part, n, 8)]
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, open(f"{work}/cms-{part}.json", "w"))
EOF
t0=$(now)
for part in 0 1 2 3 4 5 6 7; do
  in_lab $LAB "${KC[@]}" create --validate=false -f "$WORK/cms-$part.json" >/dev/null &
  PIDS+=($!)
done
for p in "${PIDS[@]}"; do wait "$p"; done
PIDS=()
create_s=$(sub "$(now)" "$t0")
count=$(in_lab $LAB "${STORE[@]}" get /registry/ --prefix --keys-only --limit 1 -w json | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])')

mkdir -p "$WORK/bundles"
kiln_save="" ectl_save=""
for _ in $(seq "$ROUNDS"); do
  timed ectl_save in_lab $LAB "${STORE[@]}" snapshot save "$WORK/etcdctl-of-kiln.db"
  rm -f "$WORK/bundles/"*
  timed kiln_save in_lab $LAB "$KILN" snapshot save -f $Y -o "$WORK/bundles"
done
BUNDLE=$(ls "$WORK"/bundles/*.kiln-bundle.tar)
bundle_mib=$(awk -v b="$(stat -c %s "$BUNDLE")" 'BEGIN {printf "%.1f", b / 1048576}')
snap_mib=$(awk -v b="$(stat -c %s "$WORK/etcdctl-of-kiln.db")" 'BEGIN {printf "%.1f", b / 1048576}')

# The anchor's own store with the same keys: etcd 3.4 on the lab network's 127.0.0.1, fed by make-mirror.
EP=http://127.0.0.1:23790
in_lab $LAB etcd --name bench --data-dir "$WORK/etcd-data" --listen-client-urls $EP --advertise-client-urls $EP \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster bench=http://127.0.0.1:23800 --quota-backend-bytes 8589934592 >"$WORK/etcd.log" 2>&1 &
EPID=$!
PIDS+=($EPID)
for _ in $(seq 200); do in_lab $LAB etcdctl --endpoints $EP endpoint health >/dev/null 2>&1 && break; sleep 0.05; done
in_lab $LAB "${STORE[@]}" make-mirror --prefix /registry/ $EP >"$WORK/mirror.log" 2>&1 &
MPID=$!
PIDS+=($MPID)
for _ in $(seq 600); do
  got=$(in_lab $LAB etcdctl --endpoints $EP get /registry/ --prefix --keys-only --limit 1 -w json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("count", 0))' || echo 0)
  [ "$got" -ge "$count" ] && break
  sleep 0.2
done
kill $MPID 2>/dev/null || true; wait $MPID 2>/dev/null || true
[ "$got" -ge "$count" ] || { echo "make-mirror copied $got of $count keys; log:" >&2; tail "$WORK/mirror.log" >&2; exit 1; }
etcd_save=""
for _ in $(seq "$ROUNDS"); do
  timed etcd_save in_lab $LAB etcdctl --endpoints $EP snapshot save "$WORK/etcd.db"
done
kill $EPID 2>/dev/null || true; wait $EPID 2>/dev/null || true
PIDS=()
etcd_mib=$(awk -v b="$(stat -c %s "$WORK/etcd.db")" 'BEGIN {printf "%.1f", b / 1048576}')

# Store data only, same flags for both, on this machine's disk.
tar -xf "$BUNDLE" -C "$WORK" snapshot.db
PEER=(--name host1 --initial-cluster host1=https://10.250.0.11:2380 --initial-advertise-peer-urls https://10.250.0.11:2380)
kiln_data="" etcd_data=""
for _ in $(seq "$ROUNDS"); do
  rm -rf "$WORK/kr" "$WORK/er"
  timed etcd_data etcdctl snapshot restore "$WORK/etcd.db" --data-dir "$WORK/er" "${PEER[@]}"
  timed kiln_data "$BIN_DIR/kiln-store" snapshot restore "$WORK/snapshot.db" --data-dir "$WORK/kr" "${PEER[@]}"
done
# etcd restored and serving again (its whole "restore" as a single member, peers on the lab's 127.0.0.1).
t0=$(now)
etcdctl snapshot restore "$WORK/etcd.db" --data-dir "$WORK/er2" --name bench \
  --initial-cluster bench=http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 >>"$WORK/log" 2>&1
in_lab $LAB etcd --name bench --data-dir "$WORK/er2" --listen-client-urls $EP --advertise-client-urls $EP \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 >"$WORK/etcd2.log" 2>&1 &
EPID=$!
PIDS+=($EPID)
etcd_full=none
for _ in $(seq 600); do
  if in_lab $LAB etcdctl --endpoints $EP endpoint health >/dev/null 2>&1; then etcd_full=$(sub "$(now)" "$t0"); break; fi
  kill -0 $EPID 2>/dev/null || { echo "restored etcd exited:" >&2; tail -5 "$WORK/etcd2.log" >&2; break; }
  sleep 0.05
done
kill $EPID 2>/dev/null || true; wait $EPID 2>/dev/null || true
PIDS=()
kiln_full=""
timed kiln_full in_lab $LAB "$KILN" snapshot restore -f $Y "$BUNDLE"
after=$(in_lab $LAB "${KC[@]}" get configmaps -n bench -o name | wc -l)
"$KILN" lab down --name $LAB >/dev/null 2>&1 || true

# ---------------------------------------------------------------- 2. HA failover
if [ "${SKIP_HA:-}" != 1 ]; then
"$KILN" lab down --name $HALAB >/dev/null 2>&1 || true
"$KILN" lab up --name $HALAB --hosts 4 --no-registry >/dev/null
HY=/tmp/kiln-lab/$HALAB/cluster.yaml
python3 - "$HY" <<'EOF'
import re, sys
p = sys.argv[1]; y = open(p).read()
for h in ("host2", "host3"):
    at = y.index(f"    - name: {h}\n"); r = y.index("role: worker", at)
    y = y[:r] + "role: controller" + y[r + len("role: worker"):]
open(p, "w").write(y)
EOF
in_lab $HALAB "$KILN" init -f $HY --bin-dir "$BIN_DIR" >>"$WORK/log" 2>&1
HPKI=/tmp/kiln-lab/$HALAB/$HALAB.kiln/pki/host1
HADMIN=/tmp/kiln-lab/$HALAB/$HALAB.kiln/admin.conf
ECTL=(etcdctl --cacert "$HPKI/store/ca.crt" --cert "$HPKI/apiserver-store-client.crt" --key "$HPKI/apiserver-store-client.key")
leader_ip=$(in_lab $HALAB "${ECTL[@]}" --endpoints https://10.250.0.11:2379,https://10.250.0.12:2379,https://10.250.0.13:2379 \
  endpoint status -w json | python3 -c '
import json, sys
v = json.load(sys.stdin); lead = v[0]["Status"]["leader"]
print(next(e["Endpoint"] for e in v if e["Status"]["header"]["member_id"] == lead)[8:-5])')
leader=host$(( ${leader_ip##*.} - 10 ))
survivor=$(for ip in 10.250.0.11 10.250.0.12 10.250.0.13; do [ $ip != "$leader_ip" ] && echo $ip && break; done)
# One line per attempt: "<ok|fail> <start> <end>".
store_loop() {
  while :; do
    local s e r=ok; s=$(now)
    in_lab $HALAB "${ECTL[@]}" --endpoints "https://$survivor:2379" --dial-timeout=1s --command-timeout=1s \
      put /failover/key "$s" >/dev/null 2>&1 || r=fail
    e=$(now); echo "$r $s $e"
  done
}
api_loop() {
  local i=0
  while :; do
    local s e r=ok; s=$(now); i=$((i + 1))
    in_lab $HALAB kubectl --kubeconfig "$HADMIN" --server "https://$survivor:6443" --request-timeout=1s \
      create configmap "failover-$i" >/dev/null 2>&1 || r=fail
    e=$(now); echo "$r $s $e"
  done
}
store_loop >"$WORK/store.attempts" & PIDS+=($!)
api_loop >"$WORK/api.attempts" & PIDS+=($!)
sleep 5
t_stop=$(now)
"$KILN" lab stop --name $HALAB "$leader" >/dev/null
t_dead=$(now)
sleep 20
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
PIDS=()
first_ok() { # file: completion of the first successful attempt started after the power-off, minus it
  awk -v t="$t_stop" '$1 == "ok" && $2 >= t {printf "%.3f", $3 - t; found=1; exit} END {if (!found) print "none"}' "$1"
}
before() { awk -v t="$t_stop" '$2 < t' "$1" | grep -c '^ok' || true; }
store_fo=$(first_ok "$WORK/store.attempts")
api_fo=$(first_ok "$WORK/api.attempts")
fi

# ---------------------------------------------------------------- results
ratio() { awk -v k="$1" -v a="$2" 'BEGIN { if (a > 0 && k != "none") printf "%.2f", k / a; else print "-" }'; }
row() { printf '%-46s %10s %10s %8s   %s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")" "$4"; }
echo "snapshots: $count keys under /registry/ ($OBJECTS ConfigMaps created in ${create_s}s); best of $ROUNDS"
echo "  bundle $bundle_mib MiB; kiln-store snapshot $snap_mib MiB; etcd 3.4 snapshot of the same keys $etcd_mib MiB"
printf '%-46s %10s %10s %8s   %s\n' metric "kiln s" "anchor s" ratio goal
row "save: bundle vs etcdctl save (same kiln-store)" "$kiln_save" "$ectl_save" "<= 1"
row "save: bundle vs etcdctl save (etcd, same keys)" "$kiln_save" "$etcd_save" ""
row "restore: store data only (kiln-store vs etcdctl)" "$kiln_data" "$etcd_data" "<= 1"
row "restore: whole command vs etcd restore+healthy" "$kiln_full" "$etcd_full" "(not a peer)"
echo "  whole command = kiln snapshot restore: bundle unpack + sha256, control plane stopped, data restored on the host,"
echo "  control plane started, healthy, objects verified ($after ConfigMaps listed after it); the anchor has no control plane"
[ "${SKIP_HA:-}" = 1 ] && exit 0
echo
echo "HA failover: 3 controllers + 1 worker; store leader $leader ($leader_ip) powered off, writes through $survivor"
echo "  (power-off took $(sub "$t_dead" "$t_stop")s; successful writes before it: store $(before "$WORK/store.attempts"), api $(before "$WORK/api.attempts"))"
printf '%-46s %10s %10s %8s   %s\n' metric "kiln s" "anchor" ratio goal
printf '%-46s %10s %10s %8s   %s\n' "first write after power-off: store (etcdctl)" "$store_fo" "-" "-" "<= 5 s"
printf '%-46s %10s %10s %8s   %s\n' "first write after power-off: API (kubectl)" "$api_fo" "-" "-" "<= 5 s"
