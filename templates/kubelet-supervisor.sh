#!/bin/sh
# kiln-kubelet supervisor for hosts without systemd (lab hosts, containers): restarts the kubelet when it
# exits, like systemd's Restart=always with RestartSec=2. Started by `kiln init`/`join`; stopped by `kiln reset`
# (which kills this script's process group by the PID in /run/kiln/kubelet-supervisor.pid).
{%- if kubelet_sha256 %}
# kiln-kubelet sha256 {{ kubelet_sha256 }}: a new binary changes this script, so `kiln init`/`apply` restart it
{%- endif %}
{%- if kubelet_config_sha256 %}
# kubelet-config.yaml sha256 {{ kubelet_config_sha256 }}: a changed KubeletConfiguration restarts the kubelet too
{%- endif %}
echo $$ > /run/kiln/kubelet-supervisor.pid
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
while :; do
  {{ kubelet_command }} >> /var/log/kiln/kubelet.log 2>&1 &
  child=$!
  wait "$child"
  echo "$(date -Is) kiln-kubelet exited with status $?; restarting in 2s" >> /var/log/kiln/kubelet.log
  sleep 2
done
