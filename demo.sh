#!/usr/bin/env bash
# kiln's main job on a fresh machine (root): install what is missing, build, bring up a lab of 3 real hosts,
# preflight, `kiln init` over SSH (host1 the control plane, host2 and host3 joined as workers), deploy the
# sample app (a Deployment of 2 with probes behind a NodePort, from the lab registry), and answer from it.
#   ./demo.sh            run the demo and leave the lab up to explore
#   ./demo.sh --down     tear the demo lab down afterwards
set -euo pipefail
cd "$(dirname "$0")"
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (the lab creates namespaces, mounts and cgroups)"; exit 1; }
.ci/install-packages
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/cache/kiln-target}
# --all-targets: the same feature resolution as `cargo test`, so nothing (RocksDB!) is built twice.
cargo build --workspace --all-targets
KILN="$CARGO_TARGET_DIR/debug/kiln"
LAB=${KILN_LAB:-demo}

echo "== kiln lab up --name $LAB --hosts 3"
"$KILN" lab up --name "$LAB" --hosts 3
echo "== each host, over SSH from inside the lab network (strict host-key checking)"
for h in host1 host2 host3; do
  "$KILN" lab ssh --name "$LAB" "$h" -- 'echo "$(hostname): $(ip -4 -o addr show eth0 | awk "{print \$4}"), $(ps -e --no-headers | wc -l) processes, machine-id $(cut -c1-8 /etc/machine-id)"'
done
echo "== the lab's cluster.yaml"
cat "/tmp/kiln-lab/$LAB/cluster.yaml"
CLUSTER="/tmp/kiln-lab/$LAB/cluster.yaml"
ADMIN="/tmp/kiln-lab/$LAB/$LAB.kiln/admin.conf"
kc() { "$KILN" lab run --name "$LAB" -- kubectl --kubeconfig "$ADMIN" "$@"; }
echo "== kiln preflight"
"$KILN" lab run --name "$LAB" -- "$KILN" preflight -f "$CLUSTER"
echo "== kiln init: PKI, push binaries and manifests over SSH, control plane, containerd, join the workers"
"$KILN" lab run --name "$LAB" -- "$KILN" init -f "$CLUSTER"
echo "== the sample app: Deployment of 2 (liveness + readiness probes) behind NodePort 30080"
kc apply -f examples/sample-app.yaml
kc rollout status deployment/web --timeout=180s
for i in $(seq 60); do [ "$(kc get endpoints web -o jsonpath='{.subsets[*].addresses[*].ip}' | wc -w)" -ge 2 ] && break; sleep 1; done
echo "== kubectl get nodes,pods,svc,endpoints -o wide"
kc get nodes,pods,svc,endpoints -o wide
echo "== the NodePort, asked from host1 to host2 and host3"
for h in 10.250.0.12 10.250.0.13 10.250.0.12 10.250.0.13; do
  "$KILN" lab ssh --name "$LAB" host1 -- "timeout 3 busybox wget -qO- http://$h:30080/"
done
echo
echo "explore:   $KILN lab shell --name $LAB"
echo "           (then: kubectl --kubeconfig $ADMIN get pods -A -o wide;  ssh -F /tmp/kiln-lab/$LAB/ssh_config host1)"
echo "reset:     $KILN lab run --name $LAB -- $KILN reset -f /tmp/kiln-lab/$LAB/cluster.yaml"
echo "tear down: $KILN lab down --name $LAB"
if [ "${1:-}" = "--down" ]; then "$KILN" lab down --name "$LAB"; fi
