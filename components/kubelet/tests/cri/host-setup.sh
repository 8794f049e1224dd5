# Lab host setup for the CRI test: CNI plugins, containerd config (restrict_oom_score_adj, the lab registry
# as a plain-http mirror), then containerd itself. Run on the host by tests/cri_lab.rs.
set -e
mkdir -p /opt/cni/bin /etc/containerd/certs.d/10.250.0.1:5000 /etc/cni/net.d /var/log/pods
for p in bridge host-local loopback portmap; do cp /usr/lib/cni/$p /opt/cni/bin/; done
cat > /etc/containerd/config.toml <<'TOML'
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "10.250.0.1:5000/kiln/pause:1"
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
TOML
cat > /etc/containerd/certs.d/10.250.0.1:5000/hosts.toml <<'TOML'
server = "http://10.250.0.1:5000"
[host."http://10.250.0.1:5000"]
  capabilities = ["pull", "resolve"]
TOML
sysctl -qw net.ipv4.ip_forward=1
setsid containerd --config /etc/containerd/config.toml >/var/log/containerd.log 2>&1 </dev/null &
for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.1; done
ctr version >/dev/null && echo containerd-up
