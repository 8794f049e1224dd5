#!/bin/sh
# managed by kiln: bring kiln's services back after a reboot on a host without systemd (run by
# /etc/rc.local). Where systemd runs, the kiln-kubelet unit and containerd's own unit do this instead.
mkdir -p /run/kiln /var/log/kiln
sysctl -qw net.ipv4.ip_forward=1
[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] && sysctl -qw net.bridge.bridge-nf-call-iptables=1
if head -1 /etc/containerd/config.toml 2>/dev/null | grep -q '^# managed by kiln' && ! [ -S /run/containerd/containerd.sock ]; then
  setsid containerd --config /etc/containerd/config.toml >>/var/log/kiln/containerd.log 2>&1 </dev/null &
  echo $! > /run/kiln/containerd.pid
fi
if ! kill -0 "$(cat /run/kiln/kubelet-supervisor.pid 2>/dev/null)" 2>/dev/null; then
  setsid /bin/sh /etc/kiln/kubelet-supervisor.sh </dev/null >/dev/null 2>&1 &
fi
if [ -f /etc/kiln/snapshot-schedule.sh ] && ! kill -0 "$(cat /run/kiln/snapshot-schedule.pid 2>/dev/null)" 2>/dev/null; then
  setsid /bin/sh /etc/kiln/snapshot-schedule.sh </dev/null >/dev/null 2>&1 &
fi
