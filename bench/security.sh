#!/usr/bin/env bash
# Benchmark: what sharing a cluster safely (issue #25) costs, on a 2-host lab cluster (host1 the
# controller, host2 the worker; release binaries, image already on the node):
#   1. pod start — COUNT pods created one after another (each once the one before runs, as
#      bench/pod-start.sh's sequential shape), binding seen → Running and created → Running p50/p99:
#      pods with limits = requests (Guaranteed: pod cgroup with CPU quota and memory limit) and
#      PodSecurity's restricted securityContext (non-root, no privilege escalation, capabilities
#      dropped, RuntimeDefault seccomp, read-only root) in a namespace enforcing `restricted`, against
#      today's unrestricted pods in the same run. Goal: restricted p99 ≤ 1.1× unrestricted.
#   2. metrics pipeline — 100 sleeping pods on host2; the kubelet's CPU seconds (utime + stime from
#      /proc/<pid>/stat) over WINDOW seconds without scraping, then over WINDOW seconds with
#      `/stats/summary` fetched every 15 s through the API server's nodes/proxy (metrics-server's
#      period). Goal: the difference ≤ 2 % of a core.
#   3. HPA reaction — a Deployment of one pod (50m CPU requested, 75m limit) under an autoscaling/v2
#      HPA at 50 %; the pod starts burning CPU (`kubectl exec … touch /tmp/go`) at t0: t0 → the HPA
#      raises the Deployment's replicas, and t0 → a second replica Ready. ROUNDS rounds (default 2),
#      the objects made anew for each. Goal ≤ 60 s. No anchor installs here: the row's anchor is
#      upstream's default loop, metrics-server's 15 s resolution + the HPA's 15 s sync = 30 s.
# Timings are printed only, never asserted. Root.
#   bench/security.sh [COUNT] [WINDOW] [ROUNDS]
# LAB names the lab (default bsec); BENCH a kiln-bench binary other than $BIN_DIR's.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-100}
WINDOW=${2:-120}
ROUNDS=${3:-2}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
[ -n "${BIN_DIR:-}" ] || cargo build --release --workspace --bins >/dev/null 2>&1 || cargo build --release --workspace --bins
BIN_DIR=${BIN_DIR:-$CARGO_TARGET_DIR/release}
KILN=$BIN_DIR/kiln
BENCH=${BENCH:-$BIN_DIR/kiln-bench}
LAB=${LAB:-bsec}
IMAGE=10.250.0.1:5000/kiln/busybox:1
trap '"$KILN" lab down --name $LAB >/dev/null 2>&1 || true' EXIT
"$KILN" lab down --name $LAB >/dev/null 2>&1 || true
"$KILN" lab up --name $LAB --hosts 2 >/dev/null
"$KILN" lab run --name $LAB -- "$KILN" init -f /tmp/kiln-lab/$LAB/cluster.yaml --bin-dir "$BIN_DIR" >/dev/null
ADMIN=/tmp/kiln-lab/$LAB/$LAB.kiln/admin.conf
k() { "$KILN" lab run --name $LAB -- kubectl --kubeconfig "$ADMIN" "$@"; }
bench() { "$KILN" lab run --name $LAB -- "$BENCH" "$@"; }
get() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); [d:=d[k] for k in sys.argv[2:]]; print(d)" "$@"; }
now() { date +%s.%N; }
apply() { # manifest on stdin
  local f=/tmp/kiln-lab/$LAB/bench-security.yaml
  cat >"$f"
  k apply -f "$f" >/dev/null
}
row() { # metric kiln anchor goal
  printf '%-52s %10.1f %10.1f %8.2f   %s\n' "$1" "$2" "$3" "$(awk -v k="$2" -v a="$3" 'BEGIN {print k / a}')" "$4"
}

# 1. Pod start: unrestricted, then restricted with the namespace enforcing `restricted`.
bench pod-start --kubeconfig "$ADMIN" --count 2 >/dev/null # the image on host2 first
plain=$(bench pod-start --kubeconfig "$ADMIN" --count "$COUNT" --sequential)
k label namespace default --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
hard=$(bench pod-start --kubeconfig "$ADMIN" --count "$COUNT" --sequential --restricted)
k label namespace default pod-security.kubernetes.io/enforce- >/dev/null

# 2. The kubelet's CPU with 100 pods, without and with /stats/summary every 15 s.
apply <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: idle}
spec:
  replicas: 100
  selector: {matchLabels: {app: idle}}
  template:
    metadata: {labels: {app: idle}}
    spec:
      nodeSelector: {kubernetes.io/hostname: host2}
      terminationGracePeriodSeconds: 0
      containers:
      - {name: c, image: $IMAGE, command: [sleep, '100000'], imagePullPolicy: IfNotPresent}
EOF
for _ in $(seq 600); do
  [ "$(k get deployment idle -o 'jsonpath={.status.readyReplicas}')" = 100 ] && break
  sleep 1
done
[ "$(k get deployment idle -o 'jsonpath={.status.readyReplicas}')" = 100 ] || { echo "100 pods not ready" >&2; exit 1; }
sleep 20 # the starts' own work settles
KPID=$("$KILN" lab exec --name $LAB host2 -- pgrep -o -x kiln-kubelet) || { echo "no kiln-kubelet process on host2" >&2; exit 1; }
TICK=$(getconf CLK_TCK)
cpu() { "$KILN" lab exec --name $LAB host2 -- cat /proc/"$KPID"/stat | awk -v t="$TICK" '{print ($14 + $15) / t}'; }
c0=$(cpu); t0=$(now)
sleep "$WINDOW"
c1=$(cpu); t1=$(now)
scrapes=0 scrape_ms=0
end=$(awk -v t="$(now)" -v w="$WINDOW" 'BEGIN {print t + w}')
while awk -v t="$(now)" -v e="$end" 'BEGIN {exit !(t < e)}'; do
  s=$(now)
  k get --raw /api/v1/nodes/host2/proxy/stats/summary | python3 -c "import json,sys; assert len(json.load(sys.stdin)['pods']) >= 100"
  e=$(now)
  scrapes=$((scrapes + 1))
  scrape_ms=$(awk -v a="$scrape_ms" -v s="$s" -v e="$e" 'BEGIN {print a + (e - s) * 1000}')
  left=$(awk -v t="$e" -v n="$end" -v s="$s" 'BEGIN {w = s + 15 - t; r = n - t; if (r < w) w = r; print (w > 0 ? w : 0)}')
  sleep "$left"
done
c2=$(cpu); t2=$(now)
idle_pct=$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" 'BEGIN {print (b - a) / (e - s) * 100}')
scraped_pct=$(awk -v a="$c1" -v b="$c2" -v s="$t1" -v e="$t2" 'BEGIN {print (b - a) / (e - s) * 100}')
k delete deployment idle --wait=false >/dev/null
for _ in $(seq 300); do
  [ -z "$(k get pods -l app=idle -o name)" ] && break
  sleep 1
done

# 3. HPA reaction time.
burner() {
  apply <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: burner}
spec:
  replicas: 1
  selector: {matchLabels: {app: burner}}
  template:
    metadata: {labels: {app: burner}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: burn
        image: $IMAGE
        command: [sh, -c, 'while [ ! -e /tmp/go ]; do sleep 0.2; done; while :; do :; done']
        resources:
          requests: {cpu: 50m, memory: 16Mi}
          limits: {cpu: 75m, memory: 32Mi}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: burner}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: burner}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 50}
EOF
}
decide=() ready=()
for r in $(seq "$ROUNDS"); do
  burner
  # The HPA has metrics for the idle pod before the load starts.
  for _ in $(seq 300); do
    [ "$(k get hpa burner -o 'jsonpath={.status.conditions[?(@.type=="ScalingActive")].status}')" = True ] && break
    sleep 1
  done
  sleep 5
  t0=$(now)
  k exec deploy/burner -- touch /tmp/go
  td=""
  for _ in $(seq 600); do
    read -r want have < <(k get deployment burner -o 'jsonpath={.spec.replicas} {.status.readyReplicas}')
    [ -z "$td" ] && [ "${want:-1}" -gt 1 ] && td=$(now)
    [ "${have:-0}" -gt 1 ] && break
    sleep 0.5
  done
  tr=$(now)
  decide+=("$(awk -v a="$t0" -v b="${td:-$tr}" 'BEGIN {print b - a}')")
  ready+=("$(awk -v a="$t0" -v b="$tr" 'BEGIN {print b - a}')")
  k delete hpa burner >/dev/null
  k delete deployment burner --wait=false >/dev/null
  for _ in $(seq 120); do
    [ -z "$(k get pods -l app=burner -o name)" ] && break
    sleep 1
  done
done
range() { printf '%s\n' "$@" | sort -n | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.1f", (lo + hi) / 2}'; }
spread() { printf '%s\n' "$@" | sort -n | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.1f–%.1f s", lo, hi}'; }

printf '%-52s %10s %10s %8s   %s\n' metric kiln anchor ratio goal
row "pod start bound→Running p50 ms (restricted|plain)" "$(get "$hard" bound_to_running p50_ms)" "$(get "$plain" bound_to_running p50_ms)" ""
row "pod start bound→Running p99 ms (restricted|plain)" "$(get "$hard" bound_to_running p99_ms)" "$(get "$plain" bound_to_running p99_ms)" "<= 1.1"
row "pod start created→Running p99 ms (restricted|plain)" "$(get "$hard" created_to_running p99_ms)" "$(get "$plain" created_to_running p99_ms)" "<= 1.1"
row "kubelet CPU % of a core, 100 pods (scraped|idle)" "$scraped_pct" "$idle_pct" ""
row "scraping cost, % of a core (kiln|goal 2 %)" "$(awk -v a="$scraped_pct" -v b="$idle_pct" 'BEGIN {print a - b}')" 2 "<= 1"
row "HPA: load → replicas raised, s (kiln|upstream 30 s)" "$(range "${decide[@]}")" 30 "<= 60 s: $(spread "${decide[@]}")"
row "HPA: load → 2nd replica Ready, s (kiln|upstream 30 s)" "$(range "${ready[@]}")" 30 "$(spread "${ready[@]}")"
echo "pod start: $COUNT sequential pods each, restricted = limits 10m/32Mi = requests + restricted securityContext, namespace enforcing restricted"
echo "kubelet CPU: ${WINDOW} s windows, pid $KPID on host2, $scrapes scrapes of $(awk -v a="$scrape_ms" -v n="$scrapes" 'BEGIN {printf "%.0f", a / n}') ms each (kubectl's own start included); HPA rows: midpoint of $ROUNDS rounds (range on the right); upstream 30 s = metrics-server resolution 15 s + HPA sync 15 s"
