//! Running the machine's own tools (ip, ssh-keygen, skopeo, ...) with errors that name the command.

use std::process::{Command, Output, Stdio};

use super::{LabError, LabLayout};

pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Run to completion; a non-zero exit is an error carrying stderr.
pub fn run(cmd: &mut Command) -> Result<Output, LabError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Command {
            cmd: describe(cmd),
            status: "could not start".into(),
            stderr: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(LabError::Command {
            cmd: describe(cmd),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// A fresh ed25519 SSH host key at `key` (and `key.pub`), labelled `root@<host>`: every lab host
/// gets its own, never the machine's.
pub fn ssh_host_keygen(key: &str, host: &str) -> Result<(), LabError> {
    ssh_keygen(key, &format!("root@{host}"))
}

/// A fresh passphrase-less ed25519 key pair at `key` and `key.pub`, with `comment`.
pub fn ssh_keygen(key: &str, comment: &str) -> Result<(), LabError> {
    run(&mut cmd(
        "ssh-keygen",
        &["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key],
    ))
    .map(|_| ())
}

pub fn cmd(program: &str, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args);
    c
}

/// `ip netns exec NS argv…` with the caller's stdio; returns the exit code.
pub fn run_in_netns_interactive(
    netns: &str,
    argv: &[String],
    l: &LabLayout,
) -> Result<i32, LabError> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", netns]);
    if argv.is_empty() {
        c.arg(std::env::var("SHELL").unwrap_or_else(|_| "/bin/bash".into()));
    } else {
        c.args(argv);
    }
    // Tools started in the lab find the lab's files without being told.
    c.env("KILN_LAB", &l.name)
        .env("KILN_LAB_DIR", &l.dir)
        .env("KILN_CLUSTER", l.cluster_yaml());
    let status = c.status().map_err(|e| LabError::Command {
        cmd: describe(&c),
        status: "could not start".into(),
        stderr: e.to_string(),
    })?;
    Ok(status.code().unwrap_or(128 + 9))
}
