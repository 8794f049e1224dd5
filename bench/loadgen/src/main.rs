use clap::{Args, Parser, Subcommand};
use kiln_bench::control_plane;
use kiln_bench::etcd_load::{run, Op, Workload};

/// Load generators for bench/*.sh; each run prints one JSON line.
#[derive(Debug, Parser)]
#[command(name = "kiln-bench", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// etcd v3 puts against an endpoint (kiln-store or etcd).
    Put(EtcdArgs),
    /// etcd v3 linearizable single-key ranges.
    Range(EtcdArgs),
    /// Scheduler throughput: pending pods over fake nodes (in-process store + apiserver + scheduler).
    Scheduler {
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
    },
    /// Pod start latency on a running cluster: binding seen → Running (and created → Running).
    PodStart {
        #[arg(long)]
        kubeconfig: String,
        #[arg(long, default_value_t = 100)]
        count: usize,
        #[arg(long, default_value = "10.250.0.1:5000/kiln/busybox:1")]
        image: String,
        /// Pods created per second; 0 creates them all at once.
        #[arg(long, default_value_t = 0.0)]
        rate: f64,
        /// Create each pod once the one before it runs (the latency shape; `--rate` is ignored).
        #[arg(long)]
        sequential: bool,
        /// Write each pod's milestones (unix ms) here as JSON lines.
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// Pods with limits and PodSecurity's restricted securityContext (bench/security.sh).
        #[arg(long)]
        restricted: bool,
    },
    /// COUNT Jobs of one short pod each against the same COUNT pods created directly.
    Jobs {
        #[arg(long)]
        kubeconfig: String,
        #[arg(long, default_value_t = 1000)]
        count: usize,
        #[arg(long, default_value = "10.250.0.1:5000/kiln/busybox:1")]
        image: String,
        /// Create calls in flight at once.
        #[arg(long, default_value_t = 20)]
        inflight: usize,
    },
    /// An OrderedReady StatefulSet scaled up from nothing against as many sequential single pods.
    Statefulset {
        #[arg(long)]
        kubeconfig: String,
        #[arg(long, default_value_t = 10)]
        replicas: usize,
        #[arg(long, default_value = "10.250.0.1:5000/kiln/busybox:1")]
        image: String,
    },
    /// The anchor of pod start: sandbox + container straight over CRI, no kubelet.
    CriFloor {
        #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
        endpoint: String,
        #[arg(long, default_value_t = 20)]
        count: usize,
        /// Pods in flight at once (1: one after another).
        #[arg(long, default_value_t = 1)]
        parallel: usize,
        #[arg(long, default_value = "10.250.0.1:5000/kiln/busybox:1")]
        image: String,
    },
    /// kiln-proxy sync time (root, inside a network namespace of its own): cold full sync and one
    /// EndpointSlice change → rules, against `nft -f` of the same table / update alone.
    ProxySync {
        /// The kiln-proxy binary to start.
        #[arg(long)]
        proxy_bin: String,
        #[arg(long, default_value_t = 1000)]
        services: usize,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        #[arg(long, default_value_t = 50)]
        rounds: usize,
    },
    /// kiln-apiserver (its own process, over the harness's store): N pods created, `kubectl get pods
    /// -A`, creates/updates at a steady rate with watchers open, RSS idle and loaded.
    Apiserver {
        /// The kiln-apiserver binary to start.
        #[arg(long)]
        apiserver_bin: String,
        #[arg(long, default_value_t = 10_000)]
        pods: usize,
        /// Mutating requests per second in the steady phase (half creates, half updates).
        #[arg(long, default_value_t = 100.0)]
        rate: f64,
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        #[arg(long, default_value_t = 100)]
        watchers: usize,
    },
    /// kiln-dns (release, its own process, over kiln-apiserver + the harness's store) against unbound
    /// serving the same records from local-data: dnsperf throughput and latency, Service created →
    /// resolvable, RSS.
    Dns(kiln_bench::dns_load::DnsOpts),
    /// The floor under a durable put here: an etcd KV server whose Put only appends, fdatasyncs
    /// and answers (store_floor.rs). Serves until killed.
    StoreFloor {
        #[arg(long, default_value = "127.0.0.1:23790")]
        listen: std::net::SocketAddr,
        /// The log file to create (it must not exist).
        #[arg(long)]
        log: std::path::PathBuf,
    },
    /// Custom resources against ConfigMaps on one kiln-apiserver: COUNT sequential creates each
    /// (p50/p99) and a LIST of all of them.
    Crds {
        #[arg(long)]
        apiserver_bin: String,
        #[arg(long, default_value_t = 10_000)]
        count: usize,
    },
    /// Controller reaction: a ReplicaSet pod deleted → its replacement created.
    Reaction {
        #[arg(long, default_value_t = 50)]
        rounds: usize,
    },
}

#[derive(Debug, Args)]
struct EtcdArgs {
    #[arg(long, default_value = "http://127.0.0.1:2379")]
    endpoint: String,
    #[arg(long, default_value_t = 1)]
    clients: usize,
    #[arg(long, default_value_t = 16)]
    conns: usize,
    #[arg(long, default_value_t = 10_000)]
    total: usize,
    #[arg(long, default_value_t = 256)]
    value_size: usize,
    /// Random keys in a space of this size; 0 writes sequential keys (a bulk load).
    #[arg(long, default_value_t = 100_000)]
    key_space: usize,
    #[arg(long, default_value = "/bench/")]
    key_prefix: String,
    /// NAME:PASSWORD of a user to authenticate as, for a server with auth enabled (etcd's
    /// `benchmark --user`).
    #[arg(long, value_parser = parse_user)]
    user: Option<(String, String)>,
}

fn parse_user(s: &str) -> Result<(String, String), String> {
    s.split_once(':')
        .map(|(name, password)| (name.to_string(), password.to_string()))
        .ok_or_else(|| format!("{s:?}: expected NAME:PASSWORD"))
}

fn workload(op: Op, a: EtcdArgs) -> Workload {
    Workload {
        endpoint: a.endpoint,
        op,
        clients: a.clients,
        conns: a.conns,
        total: a.total,
        value_size: a.value_size,
        key_space: a.key_space,
        key_prefix: a.key_prefix,
        user: a.user,
    }
}

fn print(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string(v).expect("results are JSON"));
}

#[tokio::main]
async fn main() {
    let w = match Cli::parse().cmd {
        Cmd::Put(a) => workload(Op::Put, a),
        Cmd::Range(a) => workload(Op::Range, a),
        Cmd::Scheduler { nodes, pods } => {
            print(&control_plane::scheduler(nodes, pods).await);
            return;
        }
        Cmd::CriFloor {
            endpoint,
            count,
            parallel,
            image,
        } => {
            match kiln_bench::cri_floor::run(&endpoint, count, parallel, &image).await {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::PodStart {
            kubeconfig,
            count,
            image,
            rate,
            sequential,
            trace,
            restricted,
        } => {
            match kiln_bench::pod_start::run(
                &kubeconfig,
                count,
                &image,
                rate,
                sequential,
                trace.as_deref(),
                restricted,
            )
            .await
            {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::Jobs {
            kubeconfig,
            count,
            image,
            inflight,
        } => {
            match kiln_bench::workloads::jobs(&kubeconfig, count, &image, inflight).await {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::Statefulset {
            kubeconfig,
            replicas,
            image,
        } => {
            match kiln_bench::workloads::statefulset(&kubeconfig, replicas, &image).await {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::ProxySync {
            proxy_bin,
            services,
            endpoints,
            rounds,
        } => {
            match kiln_bench::proxy_sync::run(&proxy_bin, services, endpoints, rounds).await {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::Apiserver {
            apiserver_bin,
            pods,
            rate,
            seconds,
            watchers,
        } => {
            match kiln_bench::apiserver_load::run(&apiserver_bin, pods, rate, seconds, watchers)
                .await
            {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::Crds {
            apiserver_bin,
            count,
        } => {
            match kiln_bench::crd_load::run(&apiserver_bin, count).await {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench crds: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::Dns(opts) => {
            match kiln_bench::dns_load::run(&opts).await {
                Ok(s) => print(&s),
                Err(e) => {
                    eprintln!("kiln-bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Cmd::StoreFloor { listen, log } => {
            if let Err(e) = kiln_bench::store_floor::serve(listen, &log).await {
                eprintln!("kiln-bench: {e}");
                std::process::exit(1);
            }
            return;
        }
        Cmd::Reaction { rounds } => {
            print(&control_plane::controller_reaction(rounds).await);
            return;
        }
    };
    match run(&w).await {
        Ok(s) => print(&s),
        Err(e) => {
            eprintln!("kiln-bench: {e}");
            std::process::exit(1);
        }
    }
}
