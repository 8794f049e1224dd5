//! The lab network: a namespace with a bridge, no uplink, no default route and forwarding off; one veth per
//! host, created inside the lab namespace with its peer moved straight into the host, so no lab interface
//! ever exists in the machine's own namespace.

use super::exec::{cmd, run};
use super::layout::{host_ip, LAB_GATEWAY, LAB_PREFIX};
use super::{LabError, LabLayout};

pub fn netns_exists(netns: &str) -> bool {
    std::path::Path::new("/run/netns").join(netns).exists()
}

pub fn ensure_lab_netns(l: &LabLayout) -> Result<(), LabError> {
    let ns = l.netns.as_str();
    if !netns_exists(ns) {
        run(&mut cmd("ip", &["netns", "add", ns]))?;
    }
    run(&mut cmd("ip", &["-n", ns, "link", "set", "lo", "up"]))?;
    if run(&mut cmd("ip", &["-n", ns, "link", "show", "br0"])).is_err() {
        // No STP on a star with one bridge: ports forward as soon as they are up.
        run(&mut cmd(
            "ip",
            &[
                "-n",
                ns,
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "stp_state",
                "0",
                "forward_delay",
                "0",
            ],
        ))?;
    }
    let addr = format!("{LAB_GATEWAY}/{LAB_PREFIX}");
    run(&mut cmd(
        "ip",
        &["-n", ns, "addr", "replace", &addr, "dev", "br0"],
    ))?;
    run(&mut cmd("ip", &["-n", ns, "link", "set", "br0", "up"]))?;
    // Never forward: the hosts' default route points at the bridge, and this is what makes it a dead end.
    run(&mut cmd(
        "ip",
        &[
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=0",
        ],
    ))?;
    Ok(())
}

pub fn delete_lab_netns(l: &LabLayout) -> Result<(), LabError> {
    if netns_exists(&l.netns) {
        run(&mut cmd("ip", &["netns", "del", &l.netns]))?;
    }
    Ok(())
}

fn veth(n: u32) -> String {
    format!("h{n}")
}

/// A host's NIC keeps its MAC across reboots, like a VM's: after `kiln lab start` the neighbours' ARP
/// caches stay right and traffic resumes at once (a new random MAC left them pointing at the old one).
pub fn host_mac(n: u32) -> String {
    format!("02:6b:6c:00:{:02x}:{:02x}", (n >> 8) & 0xff, n & 0xff)
}

/// Wire host `n` (PID 1 = `pid`) to the bridge and give it its address and routes.
pub fn attach_host(l: &LabLayout, n: u32, pid: i32) -> Result<(), LabError> {
    let ns = l.netns.as_str();
    let v = veth(n);
    // A stopped host's veth vanished with its netns; a repaired one may still have it.
    let _ = run(&mut cmd("ip", &["-n", ns, "link", "del", &v]));
    run(&mut cmd(
        "ip",
        &[
            "-n",
            ns,
            "link",
            "add",
            &v,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "address",
            &host_mac(n),
            "netns",
            &pid.to_string(),
        ],
    ))?;
    run(&mut cmd(
        "ip",
        &["-n", ns, "link", "set", &v, "master", "br0", "up"],
    ))?;
    Ok(())
}

/// The commands a host runs on itself to configure eth0 (run inside the host by the caller).
pub fn host_net_script(n: u32) -> String {
    // The default route points into the lab bridge; the lab namespace never forwards, so nothing leaves the
    // lab, but host processes can reach the Service range (ClusterIPs) before the nat OUTPUT hook rewrites it.
    format!(
        "ip link set lo up && ip addr replace {}/{LAB_PREFIX} dev eth0 && ip link set eth0 up && \
         ip route replace default via {LAB_GATEWAY}",
        host_ip(n)
    )
}

/// A partition takes the host's bridge port down: traffic is blocked both ways, the host keeps running.
pub fn set_partitioned(l: &LabLayout, n: u32, partitioned: bool) -> Result<(), LabError> {
    let state = if partitioned { "down" } else { "up" };
    run(&mut cmd(
        "ip",
        &["-n", &l.netns, "link", "set", &veth(n), state],
    ))?;
    if !partitioned {
        // The port needs a moment to reach the forwarding state; heal returns only once traffic flows.
        wait_forwarding(l, n)?;
    }
    Ok(())
}

fn wait_forwarding(l: &LabLayout, n: u32) -> Result<(), LabError> {
    let start = std::time::Instant::now();
    loop {
        let out = run(&mut cmd(
            "ip",
            &["-n", &l.netns, "-d", "-o", "link", "show", &veth(n)],
        ))?;
        let s = String::from_utf8_lossy(&out.stdout);
        if s.contains("LOWER_UP") && s.contains("state forwarding") {
            return Ok(());
        }
        if start.elapsed() > std::time::Duration::from_secs(10) {
            return Err(LabError::Timeout {
                what: format!("bridge port {} to forward", veth(n)),
                seconds: 10,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn is_partitioned(l: &LabLayout, n: u32) -> bool {
    match run(&mut cmd(
        "ip",
        &["-n", &l.netns, "-o", "link", "show", &veth(n)],
    )) {
        Ok(out) => {
            let s = String::from_utf8_lossy(&out.stdout);
            // "<BROADCAST,MULTICAST,UP,LOWER_UP>": the admin flag UP is absent while partitioned.
            let flags = s.split('<').nth(1).and_then(|r| r.split('>').next());
            flags.is_some_and(|f| !f.split(',').any(|x| x == "UP"))
        }
        Err(_) => false,
    }
}

/// Run `f` on a thread that has entered the lab's network namespace: the only way this process reaches
/// lab addresses, and it never changes the namespace of any other thread.
pub fn in_netns<T: Send>(netns: &str, f: impl FnOnce() -> T + Send) -> Result<T, LabError> {
    let path = std::path::Path::new("/run/netns").join(netns);
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path).map_err(LabError::io("opening netns", &path))?;
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
                LabError::Io {
                    what: "entering netns",
                    path: path.clone(),
                    source: e.into(),
                }
            })?;
            Ok(f())
        })
        .join()
        .unwrap_or(Err(LabError::Panicked))
    })
}

pub fn connect_in_netns(netns: &str, addr: &str) -> bool {
    in_netns(netns, || {
        addr.parse::<std::net::SocketAddr>().is_ok_and(|a| {
            std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_millis(200)).is_ok()
        })
    })
    .unwrap_or(false)
}
