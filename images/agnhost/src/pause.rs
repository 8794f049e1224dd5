//! `pause`: keeps a container running until it is told to stop.

use std::time::Duration;

use clap::Args;
use tokio::signal::unix::{signal, SignalKind};

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// Number of seconds to delay shutdown when receiving SIGTERM/SIGINT.
    #[arg(long = "delay-shutdown", default_value_t = 0)]
    pub delay_shutdown: u64,
}

/// The exit status upstream gives each signal (1 for SIGINT, 2 for SIGTERM): tests that look at a
/// paused container's termination see the same code as with the upstream image.
pub fn exit_code(sig: SignalKind) -> i32 {
    if sig == SignalKind::interrupt() {
        1
    } else {
        2
    }
}

pub async fn run(args: PauseArgs) -> i32 {
    println!("Paused");
    let (mut int, mut term) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("cannot watch signals: {e}");
            return 1;
        }
    };
    let code = tokio::select! {
        _ = int.recv() => exit_code(SignalKind::interrupt()),
        _ = term.recv() => exit_code(SignalKind::terminate()),
    };
    if args.delay_shutdown > 0 {
        print!("Sleeping {} seconds before exit ...", args.delay_shutdown);
        tokio::time::sleep(Duration::from_secs(args.delay_shutdown)).await;
    }
    println!("exiting {code}");
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_map_to_upstream_codes() {
        assert_eq!(exit_code(SignalKind::interrupt()), 1);
        assert_eq!(exit_code(SignalKind::terminate()), 2);
    }
}
