mod common;
use common::lab::{is_root, wait_sh};
const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";
#[test]
fn scratch() {
    if !is_root() { return; }
    let (lab, _dir) = common::lab::up_with_control_plane("kubelet-dnsx", common::lab::APISERVER_ONLY);
    lab.put(std::path::Path::new("/tmp/dnsscratch/pods.yaml"), "/tmp/pods.yaml", "0644");
    lab.sh("setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf --hostname-override host1 \
           --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 --cluster-dns 10.96.0.10 --cluster-domain cluster.local \
           --pod-infra-container-image 10.250.0.1:5000/kiln/pause:1 >/var/log/kiln-kubelet.log 2>&1 </dev/null &", b"");
    wait_sh(&lab, &format!("{KUBECTL} get node host1 -o name"), 90, "node", |o| o.contains("host1"));
    println!("{}", lab.sh(&format!("{KUBECTL} get svc -A 2>&1"), b""));
    lab.sh(&format!("{KUBECTL} apply -f /tmp/pods.yaml"), b"");
    for p in ["dnsprobe", "hostnet"] {
        let cmd = format!("cat /var/log/pods/default_{p}_*/main/0.log 2>/dev/null || true");
        wait_sh(&lab, &cmd, 120, p, |o| o.contains("==end"));
        println!("----- {p}\n{}", lab.sh(&cmd, b""));
    }
    println!("----- files\n{}", lab.sh("ls -l /var/lib/kiln/kubelet/pods/*/etc-hosts; cat /etc/resolv.conf; grep -iE 'dns|service' /var/log/kiln-kubelet.log | head -20", b""));
}
