#!/usr/bin/env bash
# Benchmark: `kiln lab up` (until every host answers SSH) and `kiln lab down`, for 3 and 10 hosts, side by
# side with the anchor — the reference shell scripts in shared/lab/reference (lab-up.sh + host-up.sh, run
# the way their README runs them). Prints seconds and kiln/anchor ratios. Root; not part of the tests.
# Then plain vs systemd hosts (`kiln lab up --init systemd`), same run: `lab up` until SSH answers and
# `kiln init` 1+2, as systemd/plain ratios (goal: systemd <= 1.5x plain).
#   bench/lab.sh [ROUNDS]      (default 3 rounds; the median is reported)
# KILN=path (and BIN_DIR=dir, the binaries `kiln init` pushes) skip the release build, e.g. the debug build;
# ONLY=init runs only the plain/systemd rows; BENCH_LAB names their lab (default bsysd).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
REF=$(cd ../shared/lab/reference && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
if [ -z "${KILN:-}" ]; then
  # The whole workspace, as every bench builds it: one feature resolution, nothing built twice.
  cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
  KILN=$CARGO_TARGET_DIR/release/kiln
fi
BIN_DIR=${BIN_DIR:-$(dirname "$KILN")}
BENCH_LAB=${BENCH_LAB:-bsysd}
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ssh_all() { # netns keyargs n
  local ns=$1 n=$3 i
  for i in $(seq 1 "$n"); do
    for _ in $(seq 200); do
      ip netns exec "$ns" ssh $2 -o ConnectTimeout=2 -o BatchMode=yes -o LogLevel=ERROR \
        -o KexAlgorithms=curve25519-sha256 root@10.250.0.$((10 + i)) true 2>/dev/null && break
      sleep 0.02
    done
  done
}

kiln_round() { # hosts -> "up down"
  local n=$1 t0 t1 t2
  "$KILN" lab down --name bench >/dev/null 2>&1 || true
  t0=$(now)
  "$KILN" lab up --name bench --hosts "$n" >/dev/null
  ssh_all kiln-lab-bench "-F /tmp/kiln-lab/bench/ssh_config" "$n"
  t1=$(now)
  "$KILN" lab down --name bench >/dev/null
  t2=$(now)
  echo "$(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc)"
}

ref_round() {
  local n=$1 t0 t1 t2 i
  LAB=labX "$REF/lab-down.sh" >/dev/null 2>&1 || true
  t0=$(now)
  LAB=labX "$REF/lab-up.sh" >/dev/null
  for i in $(seq 1 "$n"); do LAB=labX "$REF/host-up.sh" "$i" >/dev/null; done
  ssh_all labX "-i /tmp/lab/ssh/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null" "$n"
  t1=$(now)
  LAB=labX "$REF/lab-down.sh" >/dev/null 2>&1
  t2=$(now)
  echo "$(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc)"
}

init_round() { # init-mode -> "up init": lab up (3 hosts, registry) until SSH answers, then kiln init 1+2
  local mode=$1 t0 t1 t2 L=$BENCH_LAB
  "$KILN" lab down --name "$L" >/dev/null 2>&1 || true
  t0=$(now)
  "$KILN" lab up --name "$L" --hosts 3 --init "$mode" >/dev/null
  ssh_all "kiln-lab-$L" "-F /tmp/kiln-lab/$L/ssh_config" 3
  t1=$(now)
  "$KILN" lab run --name "$L" -- "$KILN" init -f "/tmp/kiln-lab/$L/cluster.yaml" --bin-dir "$BIN_DIR" >/dev/null
  t2=$(now)
  "$KILN" lab down --name "$L" >/dev/null
  echo "$(echo "$t1 - $t0" | bc) $(echo "$t2 - $t1" | bc)"
}

init_rows() {
  local pu=() pi=() su=() si=() u i PU PI SU SI
  init_round plain >/dev/null # warm (images, page cache)
  for _ in $(seq "$ROUNDS"); do
    read -r u i < <(init_round plain); pu+=("$u"); pi+=("$i")
    read -r u i < <(init_round systemd); su+=("$u"); si+=("$i")
  done
  PU=$(printf '%s\n' "${pu[@]}" | median); PI=$(printf '%s\n' "${pi[@]}" | median)
  SU=$(printf '%s\n' "${su[@]}" | median); SI=$(printf '%s\n' "${si[@]}" | median)
  printf '%-16s %10s %10s %8s   %s\n' "plain/systemd" plain systemd ratio goal
  printf '%-16s %9.2fs %9.2fs %8.2f   %s\n' "lab up 3 (SSH)" "$PU" "$SU" "$(echo "$SU / $PU" | bc -l)" "<= 1.5"
  printf '%-16s %9.2fs %9.2fs %8.2f   %s\n' "kiln init 1+2" "$PI" "$SI" "$(echo "$SI / $PI" | bc -l)" "<= 1.5"
}

if [ "${ONLY:-}" = init ]; then
  init_rows
  exit 0
fi

# Warm both (image builds, page cache) so rounds measure steady state.
kiln_round 1 >/dev/null; ref_round 1 >/dev/null

printf '%-8s %-6s %10s %10s %8s   %s\n' hosts phase kiln anchor ratio goal
for n in 3 10; do
  ku=(); kd=(); ru=(); rd=()
  for _ in $(seq "$ROUNDS"); do
    read -r u d < <(kiln_round "$n"); ku+=("$u"); kd+=("$d")
    read -r u d < <(ref_round "$n"); ru+=("$u"); rd+=("$d")
  done
  KU=$(printf '%s\n' "${ku[@]}" | median); KD=$(printf '%s\n' "${kd[@]}" | median)
  RU=$(printf '%s\n' "${ru[@]}" | median); RD=$(printf '%s\n' "${rd[@]}" | median)
  goal_up=""; goal_down=""
  [ "$n" = 3 ] && goal_up="<= 3 s (ready for SSH)" && goal_down="<= 3 s"
  printf '%-8s %-6s %9.2fs %9.2fs %8.2f   %s\n' "$n" up "$KU" "$RU" "$(echo "$KU / $RU" | bc -l)" "$goal_up"
  printf '%-8s %-6s %9.2fs %9.2fs %8.2f   %s\n' "$n" down "$KD" "$RD" "$(echo "$KD / $RD" | bc -l)" "$goal_down"
done
echo
init_rows
