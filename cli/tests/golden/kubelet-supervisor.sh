#!/bin/sh
# kiln-kubelet supervisor for hosts without systemd (lab hosts, containers): restarts the kubelet when it
# exits, like systemd's Restart=always with RestartSec=2. Started by `kiln init`/`join`; stopped by `kiln reset`
# (which kills this script's process group by the PID in /run/kiln/kubelet-supervisor.pid).
# kiln-kubelet sha256 cb37bb979d06d11b7b0b7f8e18365bdfe822c24101556f9ddd7d655c7c143194: a new binary changes this script, so `kiln init`/`apply` restart it
# kubelet-config.yaml sha256 53ecb724af7617eea4cb6764a77877587df531bea07727467972c6d5a265fcab: a changed KubeletConfiguration restarts the kubelet too
echo $$ > /run/kiln/kubelet-supervisor.pid
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
while :; do
  /usr/local/bin/kiln-kubelet --config=/etc/kiln/kubelet-config.yaml --kubeconfig=/etc/kiln/kubelet.conf --bootstrap-kubeconfig=/etc/kiln/bootstrap-kubelet.conf --root-dir=/var/lib/kiln/kubelet --hostname-override=host2 --node-ip=10.250.0.12 --pod-cidr=10.244.2.0/24 --pod-infra-container-image=10.250.0.1:5000/kiln/pause:1 --local-path-dir=/var/lib/kiln/local-path >> /var/log/kiln/kubelet.log 2>&1 &
  child=$!
  wait "$child"
  echo "$(date -Is) kiln-kubelet exited with status $?; restarting in 2s" >> /var/log/kiln/kubelet.log
  sleep 2
done
