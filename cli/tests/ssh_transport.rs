//! SshTransport against a real OpenSSH sshd, started per test on 127.0.0.1 at a free port with a fresh
//! host key (ssh-keygen) in a temp dir, and killed when the test ends.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln::transport::{
    HostKeyPolicy, Payload, SshOptions, SshTransport, Transport, TransportError, MAX_CHANNELS,
};

struct Sshd {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path, kind: &str) {
    let mut args = vec![
        "-q",
        "-t",
        kind,
        "-N",
        "",
        "-C",
        "",
        "-f",
        path.to_str().unwrap(),
    ];
    if kind == "rsa" {
        args.extend(["-b", "2048"]);
    }
    let st = Command::new("ssh-keygen")
        .args(&args)
        .status()
        .expect("ssh-keygen");
    assert!(st.success(), "ssh-keygen {kind} failed");
}

/// Bounded wait until sshd answers with its banner; false if it exited.
fn wait_ready(child: &mut Child, port: u16) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 8];
            if s.read_exact(&mut buf).is_ok() && &buf == b"SSH-2.0-" {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn free_port() -> u16 {
    // Below the kernel's ephemeral range (32768-60999), so no outgoing connection of a parallel test can
    // take the port between this check and the server binding it; never the same port twice per process.
    use std::sync::{Mutex, OnceLock};
    static GIVEN: OnceLock<Mutex<std::collections::HashSet<u16>>> = OnceLock::new();
    let given = GIVEN.get_or_init(Default::default);
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    let mut x = seed | 1;
    for _ in 0..10_000 {
        // xorshift: cheap, and different per process and per call
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + (x % 12_000) as u16;
        let mut set = given.lock().unwrap();
        if set.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            set.insert(port);
            return port;
        }
    }
    panic!("no free port in 20000-32000")
}

impl Sshd {
    fn start() -> Sshd {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_ed25519"), "ed25519");
        keygen(&d.join("client_ed25519"), "ed25519");
        std::fs::write(
            d.join("authorized_keys"),
            std::fs::read(d.join("client_ed25519.pub")).unwrap(),
        )
        .unwrap();
        // Sessions get {d}/bin first on PATH (SetEnv below), where tests put a stand-in `sudo`.
        std::fs::create_dir_all(d.join("bin")).unwrap();
        // sshd refuses to start without its privilege-separation directory (compiled-in path).
        std::fs::create_dir_all("/run/sshd").unwrap();
        // A port picked by binding :0 may be taken again before sshd binds it; retry a few times.
        for _ in 0..5 {
            let port = free_port();
            let cfg = d.join("sshd_config");
            std::fs::write(
                &cfg,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_ed25519\n\
                     AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\nStrictModes no\nUsePAM no\n\
                     PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                     AllowTcpForwarding yes\nLogLevel ERROR\n\
                     SetEnv PATH={d}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
                    d = d.display()
                ),
            )
            .unwrap();
            let log = std::fs::File::create(d.join("sshd.log")).unwrap();
            let mut child = Command::new("/usr/sbin/sshd")
                .args(["-D", "-e", "-f"])
                .arg(&cfg)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start /usr/sbin/sshd");
            if wait_ready(&mut child, port) {
                return Sshd { child, port, dir };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "sshd did not start: {}",
            std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default()
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The known_hosts line for this sshd, as `ssh-keyscan` would print it.
    fn known_line(&self) -> String {
        let key = std::fs::read_to_string(self.path("host_ed25519.pub")).unwrap();
        format!("[127.0.0.1]:{} {}\n", self.port, key.trim())
    }

    fn trusted_known_hosts(&self) -> PathBuf {
        let kh = self.path("known_hosts");
        std::fs::write(&kh, self.known_line()).unwrap();
        kh
    }

    fn opts(&self, known_hosts: PathBuf, policy: HostKeyPolicy) -> SshOptions {
        SshOptions {
            name: "node1".into(),
            address: "127.0.0.1".into(),
            port: self.port,
            user: "root".into(),
            key_file: Some(self.path("client_ed25519")),
            bastion: None,
            sudo: false,
            sudo_passwords: Default::default(),
            known_hosts,
            host_key_policy: policy,
            connect_timeout: Duration::from_secs(20),
            exec_timeout: Duration::from_secs(60),
            agent_socket: None,
        }
    }

    async fn connect(&self) -> SshTransport {
        SshTransport::connect(self.opts(self.trusted_known_hosts(), HostKeyPolicy::Strict))
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn exec_reports_status_output_and_takes_stdin() {
    let sshd = Sshd::start();
    let t = sshd.connect().await;
    assert_eq!(t.host(), "node1");
    let out = t
        .exec("echo out; echo err >&2; exit 7", None)
        .await
        .unwrap();
    assert_eq!(
        (
            out.status,
            out.stdout_str().as_str(),
            out.stderr_str().as_str()
        ),
        (7, "out\n", "err\n")
    );
    let out = t.exec("tr a-z A-Z", Some(b"hello")).await.unwrap();
    assert_eq!((out.status, out.stdout_str().as_str()), (0, "HELLO"));
    // Larger than the 2 MiB channel window in both directions: stdin is sent while output is read.
    let big: Vec<u8> = (0..5 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    let out = t.exec("cat", Some(&big)).await.unwrap();
    assert!(out.success());
    assert!(
        out.stdout == big,
        "echoed {} bytes of {}",
        out.stdout.len(),
        big.len()
    );
    let out = t.exec("kill -KILL $$", None).await.unwrap();
    assert_eq!(out.status, 128 + 9);
    assert_eq!(t.run("whoami").await.unwrap(), "root\n");
    let err = t.run("exit 3").await.unwrap_err().to_string();
    assert!(err.starts_with("node1: `exit 3`: exit status 3"), "{err}");
}

#[tokio::test]
async fn upload_is_verified_atomic_and_sets_mode() {
    let sshd = Sshd::start();
    let t = sshd.connect().await;
    let target = sshd.path("remote/sub/file.bin");
    let remote = target.to_str().unwrap();
    let data: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i * 7 % 256) as u8)
        .collect();
    t.upload(Payload::Bytes(&data), remote, 0o640)
        .await
        .unwrap();
    assert!(std::fs::read(&target).unwrap() == data);
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert!(t.download(remote).await.unwrap() == data);
    assert_eq!(t.read_file(&format!("{remote}.none")).await.unwrap(), None);
    assert!(t.download(&format!("{remote}.none")).await.is_err());

    // A file source replaces the target; no temp file is left beside it.
    let src = sshd.path("local-src");
    std::fs::write(&src, b"#!/bin/sh\necho replaced\n").unwrap();
    t.upload(Payload::File(&src), remote, 0o755).await.unwrap();
    assert_eq!(t.run(remote).await.unwrap(), "replaced\n");
    assert_eq!(
        t.read_file(remote).await.unwrap().unwrap(),
        std::fs::read(&src).unwrap()
    );
    let names: Vec<_> = std::fs::read_dir(target.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["file.bin"]);

    let err = t
        .upload(Payload::Bytes(b"x"), "relative/path", 0o644)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("must be an absolute file path"), "{err}");
}

#[tokio::test]
async fn strict_checking_refuses_an_unknown_host() {
    let sshd = Sshd::start();
    let kh = sshd.path("empty_known_hosts");
    let err = match SshTransport::connect(sshd.opts(kh.clone(), HostKeyPolicy::Strict)).await {
        Err(e) => e,
        Ok(_) => panic!("connected to an unknown host under strict checking"),
    };
    assert!(
        matches!(err, TransportError::UnknownHostKey { .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("root@node1 (127.0.0.1:"), "{msg}");
    assert!(
        msg.contains(&format!(
            "ssh-keyscan -p {} 127.0.0.1 >> {}",
            sshd.port,
            kh.display()
        )),
        "{msg}"
    );
    assert!(!kh.exists(), "strict mode must not write known_hosts");
}

#[tokio::test]
async fn accept_new_records_the_key_then_strict_succeeds() {
    let sshd = Sshd::start();
    let kh = sshd.path("new/known_hosts");
    let t = SshTransport::connect(sshd.opts(kh.clone(), HostKeyPolicy::AcceptNew))
        .await
        .unwrap();
    assert!(t.exec("true", None).await.unwrap().success());
    assert_eq!(std::fs::read_to_string(&kh).unwrap(), sshd.known_line());
    let t2 = SshTransport::connect(sshd.opts(kh.clone(), HostKeyPolicy::Strict))
        .await
        .unwrap();
    assert!(t2.exec("true", None).await.unwrap().success());
    // A second accept-new connection does not duplicate the entry.
    drop(
        SshTransport::connect(sshd.opts(kh.clone(), HostKeyPolicy::AcceptNew))
            .await
            .unwrap(),
    );
    assert_eq!(std::fs::read_to_string(&kh).unwrap(), sshd.known_line());
}

#[tokio::test]
async fn a_changed_host_key_is_refused_even_with_accept_new() {
    let sshd = Sshd::start();
    keygen(&sshd.path("other_host_key"), "ed25519");
    let other = std::fs::read_to_string(sshd.path("other_host_key.pub")).unwrap();
    let kh = sshd.path("known_hosts_changed");
    let recorded = format!("# old entry\n[127.0.0.1]:{} {}\n", sshd.port, other.trim());
    std::fs::write(&kh, &recorded).unwrap();
    for policy in [HostKeyPolicy::Strict, HostKeyPolicy::AcceptNew] {
        let err = match SshTransport::connect(sshd.opts(kh.clone(), policy)).await {
            Err(e) => e,
            Ok(_) => panic!("connected despite a changed host key ({policy:?})"),
        };
        assert!(
            matches!(err, TransportError::HostKeyChanged { line: 2, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("REMOTE HOST KEY HAS CHANGED"),
            "{err}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&kh).unwrap(),
        recorded,
        "known_hosts must be left alone"
    );
    // insecure mode is the explicit way around it
    let t = SshTransport::connect(sshd.opts(kh, HostKeyPolicy::Insecure))
        .await
        .unwrap();
    assert!(t.exec("true", None).await.unwrap().success());
}

#[tokio::test]
async fn many_parallel_execs_share_one_connection() {
    let sshd = Sshd::start();
    let t = Arc::new(sshd.connect().await);
    let n = 3 * MAX_CHANNELS;
    // Each command holds its channel a while, so far more than sshd's 10 sessions are wanted at once.
    let runs = (0..n).map(|i| {
        let t = t.clone();
        async move { t.run(&format!("sleep 0.3; echo {i}")).await }
    });
    let outs = futures::future::join_all(runs).await;
    for (i, out) in outs.into_iter().enumerate() {
        assert_eq!(out.unwrap(), format!("{i}\n"));
    }
    // sshd served them all over one TCP connection: one authenticated session process for us.
    let conns = t
        .run(&format!(
            "ss -Htn state established '( sport = :{} )' | wc -l",
            sshd.port
        ))
        .await
        .unwrap();
    assert_eq!(conns.trim(), "1");
}

#[tokio::test]
async fn rsa_keys_authenticate_with_sha2() {
    let sshd = Sshd::start();
    keygen(&sshd.path("client_rsa"), "rsa");
    let mut keys = std::fs::read_to_string(sshd.path("authorized_keys")).unwrap();
    keys.push_str(&std::fs::read_to_string(sshd.path("client_rsa.pub")).unwrap());
    std::fs::write(sshd.path("authorized_keys"), keys).unwrap();
    let mut o = sshd.opts(sshd.trusted_known_hosts(), HostKeyPolicy::Strict);
    o.key_file = Some(sshd.path("client_rsa"));
    let t = SshTransport::connect(o).await.unwrap();
    assert_eq!(t.run("echo ok").await.unwrap(), "ok\n");
}

#[tokio::test]
async fn a_wrong_key_names_user_key_and_host() {
    let sshd = Sshd::start();
    keygen(&sshd.path("stranger"), "ed25519");
    let mut o = sshd.opts(sshd.trusted_known_hosts(), HostKeyPolicy::Strict);
    o.key_file = Some(sshd.path("stranger"));
    let err = match SshTransport::connect(o).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a key that is not authorized logged in"),
    };
    let key = sshd.path("stranger");
    assert!(
        err.contains("root@node1") && err.contains(&format!("key {}", key.display())),
        "{err}"
    );
    assert!(err.contains("authentication failed"), "{err}");

    let mut o = sshd.opts(sshd.trusted_known_hosts(), HostKeyPolicy::Strict);
    o.key_file = Some(sshd.path("missing-key"));
    let err = SshTransport::connect(o)
        .await
        .err()
        .expect("missing key file")
        .to_string();
    assert!(
        err.contains("cannot load private key") && err.contains("missing-key"),
        "{err}"
    );
}

#[tokio::test]
async fn a_bastion_tunnels_the_session() {
    let sshd = Sshd::start();
    // The same sshd serves as the jump host: the session to 127.0.0.1:port is carried inside a
    // direct-tcpip channel of a first connection to it.
    let mut o = sshd.opts(sshd.trusted_known_hosts(), HostKeyPolicy::Strict);
    o.bastion = Some(kiln::transport::BastionOptions {
        address: "127.0.0.1".into(),
        port: sshd.port,
        user: "root".into(),
        key_file: Some(sshd.path("client_ed25519")),
    });
    let t = SshTransport::connect(o).await.unwrap();
    assert_eq!(t.run("echo through").await.unwrap(), "through\n");
    // Two TCP connections reach sshd from us (bastion, and the tunnel's own from sshd itself).
    let conns = t
        .run(&format!(
            "ss -Htn state established '( sport = :{} )' | wc -l",
            sshd.port
        ))
        .await
        .unwrap();
    assert_eq!(conns.trim(), "2");
}

#[tokio::test]
async fn connect_times_out_on_a_silent_server() {
    // Accepts TCP but never speaks SSH.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    keygen(&dir.path().join("k"), "ed25519");
    let o = SshOptions {
        name: "silent".into(),
        address: "127.0.0.1".into(),
        port,
        user: "root".into(),
        key_file: Some(dir.path().join("k")),
        bastion: None,
        sudo: false,
        sudo_passwords: Default::default(),
        known_hosts: dir.path().join("kh"),
        host_key_policy: HostKeyPolicy::Strict,
        connect_timeout: Duration::from_secs(1),
        exec_timeout: Duration::from_secs(5),
        agent_socket: None,
    };
    let err = SshTransport::connect(o)
        .await
        .err()
        .expect("connected to a silent server");
    assert!(
        matches!(
            err,
            TransportError::Timeout {
                step: "connect",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("root@silent (127.0.0.1:"),
        "{err}"
    );
    hold.abort();
}

/// Stands in for sudo (not installed here): checks for `-n --`, refuses like sudo does when a `deny`
/// file exists, and marks the environment so the test sees the command really went through it.
const FAKE_SUDO: &str = r#"#!/bin/sh
[ "$1" = "-n" ] || { echo "fake sudo: expected -n" >&2; exit 2; }
shift
[ "$1" = "--" ] && shift
if [ -e "$(dirname "$0")/deny" ]; then echo "sudo: a password is required" >&2; exit 1; fi
FAKE_SUDO=1 exec "$@"
"#;

#[tokio::test]
async fn sudo_wraps_commands_and_a_password_prompt_is_a_clear_error() {
    let sshd = Sshd::start();
    let sudo = sshd.path("bin/sudo");
    std::fs::write(&sudo, FAKE_SUDO).unwrap();
    std::fs::set_permissions(&sudo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut o = sshd.opts(sshd.trusted_known_hosts(), HostKeyPolicy::Strict);
    o.sudo = true;
    let t = SshTransport::connect(o).await.unwrap();
    assert_eq!(
        t.run("echo \"$FAKE_SUDO\"; printf '%s\\n' 'it is'")
            .await
            .unwrap(),
        "1\nit is\n"
    );
    let target = sshd.path("sudo-upload");
    t.upload(Payload::Bytes(b"as root"), target.to_str().unwrap(), 0o600)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"as root");

    std::fs::write(sshd.path("bin/deny"), b"").unwrap();
    let err = t.run("true").await.unwrap_err();
    assert!(matches!(err, TransportError::SudoPassword { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("node1: sudo -n refused for user root"),
        "{err}"
    );
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_ssh_agent_is_used_without_a_key_file() {
    let sshd = Sshd::start();
    let sock = sshd.path("agent.sock");
    let _agent = Agent(
        Command::new("ssh-agent")
            .args(["-D", "-a"])
            .arg(&sock)
            .stdout(Stdio::null())
            .spawn()
            .expect("start ssh-agent"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "ssh-agent socket did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = Command::new("ssh-add")
        .arg(sshd.path("client_ed25519"))
        .env("SSH_AUTH_SOCK", &sock)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "ssh-add failed");
    let mut o = sshd.opts(sshd.trusted_known_hosts(), HostKeyPolicy::Strict);
    o.key_file = None;
    o.agent_socket = Some(sock);
    let t = SshTransport::connect(o).await.unwrap();
    assert_eq!(t.run("echo via-agent").await.unwrap(), "via-agent\n");
}
