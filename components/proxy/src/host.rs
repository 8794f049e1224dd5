//! Running the host's tools (`nft`, `ip`). A command prefix (e.g. `ip netns exec NS`) lets tests aim every
//! call at a throwaway network namespace instead of the machine's own.

use std::io::Write;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
}

/// How to start host tools: directly, or behind a prefix such as `["ip", "netns", "exec", "kp-test-1"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCommand {
    pub prefix: Vec<String>,
}

impl HostCommand {
    /// Runs the tools inside the named network namespace (tests).
    pub fn in_netns(ns: &str) -> Self {
        HostCommand {
            prefix: ["ip", "netns", "exec", ns].map(String::from).to_vec(),
        }
    }

    /// Runs `program args…` with `stdin`, returning stdout; a non-zero exit is an error carrying stderr.
    pub fn run(
        &self,
        program: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Result<String, HostError> {
        let mut argv: Vec<&str> = self.prefix.iter().map(String::as_str).collect();
        argv.push(program);
        argv.extend_from_slice(args);
        let spawn_err = |source| HostError::Spawn {
            program: argv[0].to_string(),
            source,
        };
        let mut child = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_err)?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // nft reads the whole script before it answers, so writing first cannot deadlock on its output
            pipe.write_all(input.as_bytes()).map_err(spawn_err)?;
        }
        let out = child.wait_with_output().map_err(spawn_err)?;
        if !out.status.success() {
            return Err(HostError::Failed {
                command: argv.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
