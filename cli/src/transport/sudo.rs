//! sudo for non-root SSH users. Passwordless sudo (`sudo -n`) is used when the host allows it; otherwise
//! kiln asks for the password once per user — from `KILN_SUDO_PASSWORD_FILE` (for CI and cron), else with
//! a prompt on the controlling terminal (echo off) — verifies it on the host, and from then on runs
//! every command as `sudo -S -k -p '' -- sh -c …` with the password as the first line of stdin. `-k`
//! makes sudo read the password every time, so the line never reaches the command's own stdin (an upload
//! must not end up with the password in the file). The password is never logged or put on a command line.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A sudo password, redacted in Debug output.
#[derive(Clone)]
pub struct Secret(Arc<String>);

impl Secret {
    pub fn new(s: String) -> Secret {
        Secret(Arc::new(s))
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SudoError {
    #[error("reading the sudo password from {path} (KILN_SUDO_PASSWORD_FILE): {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no terminal to ask for the sudo password of {user} on: set KILN_SUDO_PASSWORD_FILE, allow passwordless sudo (NOPASSWD) or connect as root")]
    NoTerminal { user: String },
    #[error("reading the sudo password from the terminal: {0}")]
    Terminal(std::io::Error),
}

/// Where passwords come from; one per user for the whole run, shared by every host's connection.
#[derive(Debug, Default, Clone)]
pub struct SudoPasswords {
    known: Arc<Mutex<HashMap<String, Secret>>>,
    /// Serialises prompts so two hosts never ask at once.
    prompt: Arc<tokio::sync::Mutex<()>>,
}

impl SudoPasswords {
    /// The password of `user`, asked for at most once per run.
    pub async fn get(&self, user: &str, host: &str) -> Result<Secret, SudoError> {
        let _one = self.prompt.lock().await;
        if let Some(s) = self.known.lock().expect("sudo passwords").get(user) {
            return Ok(s.clone());
        }
        let secret = match std::env::var_os("KILN_SUDO_PASSWORD_FILE") {
            Some(path) => read_file(PathBuf::from(path))?,
            None => {
                let (user, host) = (user.to_string(), host.to_string());
                tokio::task::spawn_blocking(move || prompt(&user, &host))
                    .await
                    .map_err(|e| SudoError::Terminal(std::io::Error::other(e)))??
            }
        };
        self.known
            .lock()
            .expect("sudo passwords")
            .insert(user.to_string(), secret.clone());
        Ok(secret)
    }

    /// Forgets a password the host refused, so the next attempt asks again.
    pub fn forget(&self, user: &str) {
        self.known.lock().expect("sudo passwords").remove(user);
    }
}

fn read_file(path: PathBuf) -> Result<Secret, SudoError> {
    let text = std::fs::read_to_string(&path).map_err(|source| SudoError::File {
        path: path.clone(),
        source,
    })?;
    Ok(Secret::new(first_line(&text)))
}

/// The password is the first line, without its line ending.
pub fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

/// Asks on /dev/tty with echo off (like sudo and ssh do), restoring the terminal afterwards.
fn prompt(user: &str, host: &str) -> Result<Secret, SudoError> {
    use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|_| SudoError::NoTerminal {
            user: user.to_string(),
        })?;
    let saved = tcgetattr(&tty).map_err(|e| SudoError::Terminal(e.into()))?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    quiet.local_flags.insert(LocalFlags::ECHONL);
    tcsetattr(&tty, SetArg::TCSANOW, &quiet).map_err(|e| SudoError::Terminal(e.into()))?;
    let result = (|| {
        let mut w = &tty;
        write!(
            w,
            "[kiln] sudo password for {user} (first asked by {host}): "
        )?;
        w.flush()?;
        let mut line = String::new();
        std::io::BufReader::new(&tty).read_line(&mut line)?;
        Ok(line)
    })();
    let _ = tcsetattr(&tty, SetArg::TCSANOW, &saved);
    let line = result.map_err(SudoError::Terminal)?;
    Ok(Secret::new(first_line(&line)))
}

/// `cmd` for a user whose sudo needs a password (see the module docs).
pub fn with_password(cmd: &str) -> String {
    format!("sudo -S -k -p '' -- sh -c {}", super::shell_quote(cmd))
}

/// `cmd` under passwordless sudo.
pub fn without_password(cmd: &str) -> String {
    format!("sudo -n -- sh -c {}", super::shell_quote(cmd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("hunter2".into());
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn the_password_is_the_first_line() {
        assert_eq!(first_line("pw\n"), "pw");
        assert_eq!(first_line("pw\r\nrest"), "pw");
        assert_eq!(first_line(""), "");
    }

    #[test]
    fn commands_never_carry_the_password() {
        let c = with_password("cat > '/etc/x'");
        assert_eq!(c, "sudo -S -k -p '' -- sh -c 'cat > '\\''/etc/x'\\'''");
        assert!(without_password("true").starts_with("sudo -n -- sh -c"));
    }

    #[tokio::test]
    async fn a_password_file_is_read_once_per_user() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        std::env::set_var("KILN_SUDO_PASSWORD_FILE", &f);
        let p = SudoPasswords::default();
        assert_eq!(p.get("alice", "host2").await.unwrap().expose(), "s3cret");
        std::fs::write(&f, "changed\n").unwrap();
        assert_eq!(p.get("alice", "host3").await.unwrap().expose(), "s3cret");
        p.forget("alice");
        assert_eq!(p.get("alice", "host3").await.unwrap().expose(), "changed");
        std::env::remove_var("KILN_SUDO_PASSWORD_FILE");
    }
}
