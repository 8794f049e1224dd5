use clap::{Parser, ValueEnum};
use kiln_bench::etcd_load::{run, Op, Workload};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OpArg {
    Put,
    Range,
}

/// One etcd v3 load run; prints a JSON summary (ops, per_second, p50_ms, p99_ms, …).
#[derive(Debug, Parser)]
#[command(name = "kiln-bench", version)]
struct Args {
    #[arg(value_enum)]
    op: OpArg,
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
}

#[tokio::main]
async fn main() {
    let a = Args::parse();
    let w = Workload {
        endpoint: a.endpoint,
        op: match a.op {
            OpArg::Put => Op::Put,
            OpArg::Range => Op::Range,
        },
        clients: a.clients,
        conns: a.conns,
        total: a.total,
        value_size: a.value_size,
        key_space: a.key_space,
        key_prefix: a.key_prefix,
    };
    match run(&w).await {
        Ok(s) => println!("{}", serde_json::to_string(&s).expect("summary is JSON")),
        Err(e) => {
            eprintln!("kiln-bench: {e}");
            std::process::exit(1);
        }
    }
}
