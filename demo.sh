#!/usr/bin/env bash
# kiln's main job on a fresh machine (root): install what is missing, build, bring up a lab of real hosts,
# bootstrap the control plane on host1 over SSH with `kiln init`, and show it with the real kubectl.
# Later issues grow this into the full walkthrough (join the workers, an app served behind a NodePort).
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
echo "== kiln init: preflight, PKI, push binaries and manifests over SSH, start the control plane"
"$KILN" lab run --name "$LAB" -- "$KILN" init -f "/tmp/kiln-lab/$LAB/cluster.yaml"
ADMIN="/tmp/kiln-lab/$LAB/$LAB.kiln/admin.conf"
echo "== kubectl get nodes -o wide; kubectl get pods -A"
"$KILN" lab run --name "$LAB" -- kubectl --kubeconfig "$ADMIN" get nodes -o wide
"$KILN" lab run --name "$LAB" -- kubectl --kubeconfig "$ADMIN" get pods -A
echo
echo "explore:   $KILN lab shell --name $LAB"
echo "           (then: kubectl --kubeconfig $ADMIN get pods -A;  ssh -F /tmp/kiln-lab/$LAB/ssh_config host1)"
echo "reset:     $KILN lab run --name $LAB -- $KILN reset -f /tmp/kiln-lab/$LAB/cluster.yaml"
echo "tear down: $KILN lab down --name $LAB"
if [ "${1:-}" = "--down" ]; then "$KILN" lab down --name "$LAB"; fi
