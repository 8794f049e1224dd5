//! SshTransport: one russh connection per host, multiplexing exec channels.
//!
//! - Authentication: the given key file (ed25519, ECDSA, RSA with the best hash the server accepts;
//!   passphrase-protected keys are not supported yet), else the ssh-agent when SSH_AUTH_SOCK is set,
//!   else the default identities `~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`, like OpenSSH.
//! - Host keys: checked against known_hosts (strict by default, `accept-new`, or `insecure`).
//! - Jump host: a direct-tcpip channel through the bastion carries the host's SSH session.
//! - Concurrency: sshd allows 10 sessions per connection (MaxSessions); a semaphore keeps at most
//!   [`MAX_CHANNELS`] channels open so any number of callers can share the connection.
//! - sudo: commands of non-root users run under `sudo -n`, or with a password asked once per user
//!   (see [`super::sudo`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use russh::client::{self, Handle};
use russh::keys::agent::client::AgentClient;
use russh::keys::agent::AgentIdentity;
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg};
use russh::{ChannelMsg, Sig};
use tokio::sync::Semaphore;

use super::host_key_check::{host_key_error, HostKeyCheck, HostKeyPolicy};
use super::sudo::{self, Secret, SudoPasswords};
use super::{
    payload_digest, upload_result, upload_script, ExecOutput, Payload, Result, Target, Transport,
    TransportError,
};

/// How commands become root.
#[derive(Debug, Clone)]
enum SudoMode {
    /// Root already, or sudo not wanted.
    Off,
    NoPassword,
    Password(Secret),
}

/// Channels open at once per connection; sshd's default MaxSessions is 10.
pub const MAX_CHANNELS: usize = 8;

#[derive(Debug, Clone)]
pub struct BastionOptions {
    pub address: String,
    pub port: u16,
    pub user: String,
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct SshOptions {
    /// Host name for messages (cluster.yaml `name`).
    pub name: String,
    pub address: String,
    pub port: u16,
    pub user: String,
    pub key_file: Option<PathBuf>,
    pub bastion: Option<BastionOptions>,
    pub sudo: bool,
    /// Passwords for users whose sudo asks for one, shared by every connection of a run.
    pub sudo_passwords: SudoPasswords,
    pub known_hosts: PathBuf,
    pub host_key_policy: HostKeyPolicy,
    pub connect_timeout: Duration,
    pub exec_timeout: Duration,
    /// ssh-agent socket (normally $SSH_AUTH_SOCK), used when no key file is given.
    pub agent_socket: Option<PathBuf>,
}

pub struct SshTransport {
    target: Target,
    handle: Handle<HostKeyCheck>,
    /// Keeps the jump connection alive as long as the tunnelled one.
    _bastion: Option<Handle<HostKeyCheck>>,
    channels: Arc<Semaphore>,
    sudo: SudoMode,
    exec_timeout: Duration,
}

impl SshTransport {
    pub async fn connect(opts: SshOptions) -> Result<Self> {
        let via = opts
            .bastion
            .as_ref()
            .map(|b| format!("{}@{}:{}", b.user, b.address, b.port));
        let mut target = Target {
            host: opts.name.clone(),
            address: opts.address.clone(),
            port: opts.port,
            user: opts.user.clone(),
            key_file: opts.key_file.clone(),
            via,
        };
        let config = Arc::new(client::Config {
            // Notice dead hosts (rebooted VM, pulled cable) instead of hanging until the exec timeout.
            keepalive_interval: Some(Duration::from_secs(15)),
            keepalive_max: 3,
            nodelay: true,
            ..Default::default()
        });
        let timeout = opts.connect_timeout;
        let work = async {
            let mut bastion_handle = None;
            let handle = match &opts.bastion {
                None => {
                    let tcp = tcp_connect(&target, &opts.address, opts.port).await?;
                    handshake(
                        &target,
                        &opts,
                        config.clone(),
                        tcp,
                        &opts.address,
                        opts.port,
                    )
                    .await?
                }
                Some(b) => {
                    let mut bt = Target {
                        host: format!("bastion {}", b.address),
                        address: b.address.clone(),
                        port: b.port,
                        user: b.user.clone(),
                        key_file: b.key_file.clone(),
                        via: None,
                    };
                    let tcp = tcp_connect(&bt, &b.address, b.port).await?;
                    let mut bh =
                        handshake(&bt, &opts, config.clone(), tcp, &b.address, b.port).await?;
                    authenticate(
                        &mut bh,
                        &mut bt,
                        b.key_file.as_deref(),
                        opts.agent_socket.as_deref(),
                    )
                    .await?;
                    let ch = bh
                        .channel_open_direct_tcpip(
                            opts.address.clone(),
                            opts.port as u32,
                            "127.0.0.1",
                            0,
                        )
                        .await
                        .map_err(|source| TransportError::Ssh {
                            target: Box::new(bt.clone()),
                            step: "open tunnel to the host (direct-tcpip)",
                            source,
                        })?;
                    let h = handshake(
                        &target,
                        &opts,
                        config.clone(),
                        ch.into_stream(),
                        &opts.address,
                        opts.port,
                    )
                    .await?;
                    bastion_handle = Some(bh);
                    h
                }
            };
            let mut handle = handle;
            authenticate(
                &mut handle,
                &mut target,
                opts.key_file.as_deref(),
                opts.agent_socket.as_deref(),
            )
            .await?;
            Ok::<_, TransportError>((handle, bastion_handle))
        };
        let (handle, bastion) =
            tokio::time::timeout(timeout, work)
                .await
                .map_err(|_| TransportError::Timeout {
                    target: Box::new(target.clone()),
                    step: "connect",
                    after: timeout,
                })??;
        tracing::debug!(host = %target.host, address = %target.address, "ssh connected");
        let mut t = SshTransport {
            target,
            handle,
            _bastion: bastion,
            channels: Arc::new(Semaphore::new(MAX_CHANNELS)),
            sudo: SudoMode::Off,
            exec_timeout: opts.exec_timeout,
        };
        if opts.sudo {
            t.sudo = t.sudo_mode(&opts.sudo_passwords).await?;
        }
        Ok(t)
    }

    /// Passwordless sudo if the host allows it, else the user's password, checked once here.
    async fn sudo_mode(&self, passwords: &SudoPasswords) -> Result<SudoMode> {
        let probe = self.run_raw("sudo -n true", None).await?;
        if probe.success() {
            return Ok(SudoMode::NoPassword);
        }
        let refused = |message: String| TransportError::Refused {
            target: Box::new(self.target.clone()),
            step: "sudo",
            message,
        };
        let stderr = String::from_utf8_lossy(&probe.stderr).to_string();
        if !stderr.contains("password is required") {
            return Err(refused(format!("`sudo -n true` failed: {}", stderr.trim())));
        }
        let secret = passwords
            .get(&self.target.user, &self.target.host)
            .await
            .map_err(|e| refused(e.to_string()))?;
        let check = self
            .run_raw(&sudo::with_password("true"), Some((&secret, None)))
            .await?;
        if !check.success() {
            passwords.forget(&self.target.user);
            let why = String::from_utf8_lossy(&check.stderr);
            let why = if why.trim().is_empty() {
                "wrong password".to_string()
            } else {
                why.trim().replace('\n', " ")
            };
            return Err(refused(format!(
                "sudo refused user {}: {why}",
                self.target.user
            )));
        }
        Ok(SudoMode::Password(secret))
    }

    /// Returns once the connection is gone.
    async fn closed(&self) {
        while !self.handle.is_closed() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Closes the connection (dropping the transport closes it too, less politely).
    pub async fn close(&self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }

    fn ssh_err(&self, step: &'static str) -> impl FnOnce(russh::Error) -> TransportError + '_ {
        move |source| TransportError::Ssh {
            target: Box::new(self.target.clone()),
            step,
            source,
        }
    }

    fn wrap(&self, cmd: &str) -> String {
        match self.sudo {
            SudoMode::Off => cmd.to_string(),
            SudoMode::NoPassword => sudo::without_password(cmd),
            SudoMode::Password(_) => sudo::with_password(cmd),
        }
    }

    /// Open a session channel. sshd frees a session slot a little after the channel closes, so under
    /// bursts of short commands a refusal (MaxSessions) is retried with backoff before it is an error.
    async fn open_session(&self) -> Result<russh::Channel<russh::client::Msg>> {
        let mut delay = std::time::Duration::from_millis(25);
        let mut attempt = 0;
        loop {
            match self.handle.channel_open_session().await {
                Ok(c) => return Ok(c),
                Err(russh::Error::ChannelOpenFailure(reason)) if attempt < 8 => {
                    tracing::debug!(host = %self.target.host, ?reason, attempt, "channel open refused, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(1));
                    attempt += 1;
                }
                Err(e) => return Err(self.ssh_err("open channel")(e)),
            }
        }
    }

    async fn run_channel(&self, cmd: &str, input: Option<Payload<'_>>) -> Result<ExecOutput> {
        let wrapped = self.wrap(cmd);
        let out = match &self.sudo {
            SudoMode::Password(secret) => self.run_raw(&wrapped, Some((secret, input))).await?,
            _ => self.run_raw_input(&wrapped, None, input).await?,
        };
        if matches!(self.sudo, SudoMode::NoPassword)
            && out.status == 1
            && String::from_utf8_lossy(&out.stderr).contains("password is required")
        {
            return Err(TransportError::SudoPassword {
                host: self.target.host.clone(),
                user: self.target.user.clone(),
            });
        }
        Ok(out)
    }

    /// `cmd` as given (no sudo wrapping); with a password, it is sent as stdin's first line.
    async fn run_raw(
        &self,
        cmd: &str,
        password: Option<(&Secret, Option<Payload<'_>>)>,
    ) -> Result<ExecOutput> {
        match password {
            Some((secret, input)) => self.run_raw_input(cmd, Some(secret), input).await,
            None => self.run_raw_input(cmd, None, None).await,
        }
    }

    async fn run_raw_input(
        &self,
        cmd: &str,
        password: Option<&Secret>,
        input: Option<Payload<'_>>,
    ) -> Result<ExecOutput> {
        let _permit = self
            .channels
            .acquire()
            .await
            .expect("semaphore never closed");
        let channel = self.open_session().await?;
        let (mut read, write) = channel.split();
        write.exec(true, cmd).await.map_err(self.ssh_err("exec"))?;
        // Send stdin while reading output: a command that echoes its input cannot deadlock us.
        let feed = async {
            if let Some(secret) = password {
                write
                    .data_bytes(format!("{}\n", secret.expose()).into_bytes())
                    .await
                    .map_err(self.ssh_err("send sudo password"))?;
            }
            match input {
                None => {}
                Some(Payload::Bytes(b)) => write
                    .data_bytes(b.to_vec())
                    .await
                    .map_err(self.ssh_err("send stdin"))?,
                Some(Payload::File(p)) => {
                    let f =
                        tokio::fs::File::open(p)
                            .await
                            .map_err(|source| TransportError::Io {
                                target: Box::new(self.target.clone()),
                                step: "open upload source",
                                source,
                            })?;
                    write.data(f).await.map_err(self.ssh_err("send file"))?;
                }
            }
            write.eof().await.map_err(self.ssh_err("send eof"))
        };
        let collect = async {
            let mut out = ExecOutput::default();
            let mut status = None;
            while let Some(msg) = read.wait().await {
                match msg {
                    ChannelMsg::Data { data } => out.stdout.extend_from_slice(&data),
                    ChannelMsg::ExtendedData { data, ext: 1 } => {
                        out.stderr.extend_from_slice(&data)
                    }
                    ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status as i32),
                    ChannelMsg::ExitSignal { signal_name, .. } => {
                        status = Some(128 + signal_number(&signal_name))
                    }
                    // `exec(true, …)` does not wait for the reply; a refusal arrives here.
                    ChannelMsg::Failure => {
                        return Err(TransportError::Refused {
                            target: Box::new(self.target.clone()),
                            step: "exec",
                            message: "exec request rejected".into(),
                        })
                    }
                    _ => {}
                }
            }
            out.status = status.ok_or_else(|| TransportError::Other {
                host: self.target.host.clone(),
                step: "exec",
                message: "channel closed without an exit status (connection lost?)".into(),
            })?;
            Ok(out)
        };
        let work = async {
            // Once the command has exited, stop feeding it: a send waiting for window space on a channel
            // the server closed (the command failed early, e.g. a full disk) would wait forever.
            tokio::pin!(feed);
            tokio::pin!(collect);
            let mut fed: Option<Result<()>> = None;
            let out = loop {
                tokio::select! {
                    r = &mut feed, if fed.is_none() => fed = Some(r),
                    out = &mut collect => break out,
                }
            };
            // Both may have finished in the same wake-up (select picks a ready branch at random): a feed
            // that is done must count as done.
            if fed.is_none() {
                fed = futures::FutureExt::now_or_never(&mut feed);
            }
            let fed = fed.unwrap_or_else(|| {
                Err(TransportError::Other {
                    host: self.target.host.clone(),
                    step: "send stdin",
                    message: "the command exited before reading all of its input".into(),
                })
            });
            let out = out?;
            // A command that exits before reading all of stdin makes sending fail; its status tells more.
            if let Err(e) = fed {
                if out.success() {
                    return Err(e);
                }
            }
            Ok(out)
        };
        // A connection that dies mid-command (sshd killed, host gone) must fail the command now, not when
        // the exec timeout runs out: a send waiting for window space would otherwise never return.
        let work = async {
            tokio::select! {
                r = work => r,
                _ = self.closed() => Err(TransportError::Other {
                    host: self.target.host.clone(),
                    step: "exec",
                    message: "the SSH connection was lost".into(),
                }),
            }
        };
        let out = tokio::time::timeout(self.exec_timeout, work)
            .await
            .map_err(|_| TransportError::Timeout {
                target: Box::new(self.target.clone()),
                step: "exec",
                after: self.exec_timeout,
            })??;
        Ok(out)
    }
}

#[async_trait]
impl Transport for SshTransport {
    fn host(&self) -> &str {
        &self.target.host
    }

    async fn exec(&self, cmd: &str, stdin: Option<&[u8]>) -> Result<ExecOutput> {
        self.run_channel(cmd, stdin.map(Payload::Bytes)).await
    }

    async fn upload(&self, src: Payload<'_>, remote: &str, mode: u32) -> Result<()> {
        let (sha, len) = payload_digest(src)
            .await
            .map_err(|source| TransportError::Io {
                target: Box::new(self.target.clone()),
                step: "read upload source",
                source,
            })?;
        let script =
            upload_script(remote, &sha, mode).map_err(|message| TransportError::Other {
                host: self.target.host.clone(),
                step: "upload",
                message,
            })?;
        tracing::debug!(host = %self.target.host, remote, bytes = len, "upload");
        let out = self.run_channel(&script, Some(src)).await?;
        upload_result(&self.target.host, remote, out)
    }
}

async fn tcp_connect(target: &Target, address: &str, port: u16) -> Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpStream::connect((address, port))
        .await
        .map_err(|source| TransportError::Io {
            target: Box::new(target.clone()),
            step: "tcp connect",
            source,
        })?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// SSH handshake over `stream`, with host-key checking for `address:port`.
async fn handshake<S>(
    target: &Target,
    opts: &SshOptions,
    config: Arc<client::Config>,
    stream: S,
    address: &str,
    port: u16,
) -> Result<Handle<HostKeyCheck>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let check = HostKeyCheck::new(address, port, &opts.known_hosts, opts.host_key_policy);
    let failure = check.failure();
    client::connect_stream(config, stream, check)
        .await
        .map_err(|source| {
            let refused = failure.lock().expect("lock").take();
            host_key_error(refused, target, &opts.known_hosts, address, port).unwrap_or_else(|| {
                TransportError::Ssh {
                    target: Box::new(target.clone()),
                    step: "ssh handshake",
                    source,
                }
            })
        })
}

async fn authenticate(
    handle: &mut Handle<HostKeyCheck>,
    target: &mut Target,
    key_file: Option<&Path>,
    agent_socket: Option<&Path>,
) -> Result<()> {
    if let Some(path) = key_file {
        let key = load_key(target, path)?;
        return auth_with_key(handle, target, key).await;
    }
    if let Some(sock) = agent_socket {
        return auth_with_agent(handle, target, sock).await;
    }
    let home = crate::config::home_dir();
    for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
        let path = home.join(".ssh").join(name);
        if path.exists() {
            target.key_file = Some(path.clone());
            let key = load_key(target, &path)?;
            return auth_with_key(handle, target, key).await;
        }
    }
    Err(TransportError::Agent {
        target: Box::new(target.clone()),
        message: "no key: set ssh.keyFile in cluster.yaml, start an ssh-agent (SSH_AUTH_SOCK), or create ~/.ssh/id_ed25519"
            .into(),
    })
}

fn load_key(target: &Target, path: &Path) -> Result<PrivateKey> {
    russh::keys::load_secret_key(path, None).map_err(|e| TransportError::KeyFile {
        target: Box::new(target.clone()),
        path: path.to_path_buf(),
        message: match e {
            russh::keys::Error::KeyIsEncrypted => "the key is passphrase-protected; load it into an ssh-agent \
                                                   and leave ssh.keyFile unset (passphrases are not supported yet)"
                .to_string(),
            other => other.to_string(),
        },
    })
}

async fn auth_with_key(
    handle: &mut Handle<HostKeyCheck>,
    target: &Target,
    key: PrivateKey,
) -> Result<()> {
    let ssh_err = |source| TransportError::Ssh {
        target: Box::new(target.clone()),
        step: "authenticate",
        source,
    };
    // RSA needs the hash the server accepts (SHA-2); asking costs a wait for ext-info, so only for RSA.
    let hash = if key.algorithm().is_rsa() {
        handle
            .best_supported_rsa_hash()
            .await
            .map_err(ssh_err)?
            .flatten()
    } else {
        None
    };
    let res = handle
        .authenticate_publickey(
            target.user.clone(),
            PrivateKeyWithHashAlg::new(Arc::new(key), hash),
        )
        .await
        .map_err(ssh_err)?;
    if res.success() {
        Ok(())
    } else {
        Err(TransportError::AuthRejected {
            target: Box::new(target.clone()),
        })
    }
}

async fn auth_with_agent(
    handle: &mut Handle<HostKeyCheck>,
    target: &Target,
    sock: &Path,
) -> Result<()> {
    let agent_err = |message: String| TransportError::Agent {
        target: Box::new(target.clone()),
        message,
    };
    let mut agent = AgentClient::connect_uds(sock)
        .await
        .map_err(|e| agent_err(format!("connect to {}: {e}", sock.display())))?;
    let identities = agent
        .request_identities()
        .await
        .map_err(|e| agent_err(format!("list keys: {e}")))?;
    for id in identities {
        let AgentIdentity::PublicKey { key, .. } = id else {
            continue;
        };
        let hash = if key.algorithm().is_rsa() {
            handle
                .best_supported_rsa_hash()
                .await
                .map_err(|source| TransportError::Ssh {
                    target: Box::new(target.clone()),
                    step: "authenticate",
                    source,
                })?
                .flatten()
        } else {
            None
        };
        match handle
            .authenticate_publickey_with(target.user.clone(), key, hash, &mut agent)
            .await
        {
            Ok(r) if r.success() => return Ok(()),
            Ok(_) => continue,
            Err(e) => tracing::debug!(host = %target.host, error = %e, "agent key failed"),
        }
    }
    Err(TransportError::AuthRejected {
        target: Box::new(target.clone()),
    })
}

fn signal_number(sig: &Sig) -> i32 {
    match sig {
        Sig::HUP => 1,
        Sig::INT => 2,
        Sig::QUIT => 3,
        Sig::ILL => 4,
        Sig::ABRT => 6,
        Sig::FPE => 8,
        Sig::KILL => 9,
        Sig::USR1 => 10,
        Sig::SEGV => 11,
        Sig::PIPE => 13,
        Sig::ALRM => 14,
        Sig::TERM => 15,
        Sig::Custom(_) => 127,
    }
}
