//! The command line, defined once as data (clap derive), and the dispatch from parsed arguments to the
//! library. `main.rs` only calls [`main`].

mod lab;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kiln",
    version,
    about = "A declarative cluster bootstrapper for kiln's own Kubernetes components"
)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `debug` or `kiln=trace`.
    #[arg(long, global = true, env = "KILN_LOG", default_value = "info")]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A local cluster of real hosts (namespaces, sshd, containerd) on this machine.
    #[command(subcommand)]
    Lab(lab::LabCommand),
}

/// Parse, run, and turn the outcome into a process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    init_tracing(&cli.log);
    let result = match cli.command {
        Command::Lab(c) => lab::run(c),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            1
        }
    }
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
