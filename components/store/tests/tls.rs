//! TLS on the client port with client-certificate authentication (certs made here with rcgen).

mod common;

use std::path::Path;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
    /// A client certificate from a CA the server does not trust.
    stranger: (String, String),
}

fn ca() -> (CertificateParams, KeyPair, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "kiln-store-test-ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).unwrap();
    (params, key, cert.pem())
}

fn leaf(issuer: &Issuer<'_, KeyPair>, cn: &str, server: bool) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    if server {
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    } else {
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    }
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki() -> Pki {
    let (ca_params, ca_key, ca_pem) = ca();
    let issuer = Issuer::new(ca_params, ca_key);
    let (other_params, other_key, _) = ca();
    let other = Issuer::new(other_params, other_key);
    Pki {
        ca: ca_pem,
        server: leaf(&issuer, "kiln-store", true),
        client: leaf(&issuer, "kube-apiserver-etcd-client", false),
        stranger: leaf(&other, "stranger", false),
    }
}

fn write(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

async fn tls_client(
    addr: std::net::SocketAddr,
    ca: &str,
    id: Option<&(String, String)>,
) -> Result<Client, etcd_client::Error> {
    let mut tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some((cert, key)) = id {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let opts = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(std::time::Duration::from_secs(5))
        .with_timeout(std::time::Duration::from_secs(10));
    Client::connect([format!("https://{addr}")], Some(opts)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_cert_auth_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki();
    let certs = dir.path().join("pki");
    std::fs::create_dir_all(&certs).unwrap();
    let ca = write(&certs, "ca.crt", &pki.ca);
    let server_crt = write(&certs, "server.crt", &pki.server.0);
    let server_key = write(&certs, "server.key", &pki.server.1);
    let client_crt = write(&certs, "client.crt", &pki.client.0);
    let client_key = write(&certs, "client.key", &pki.client.1);

    let mut config = common::config(&dir.path().join("data"));
    config.listen_client_urls = vec!["https://127.0.0.1:0".into()];
    config.advertise_client_urls = vec!["https://127.0.0.1:0".into()];
    config.cert_file = Some(server_crt);
    config.key_file = Some(server_key);
    config.client_cert_auth = true;
    config.trusted_ca_file = Some(ca.clone());
    let store = common::start_with(config).await;
    let addr = store.client_addr();

    // A trusted client certificate works.
    let mut c = tokio::time::timeout(common::WAIT, tls_client(addr, &pki.ca, Some(&pki.client)))
        .await
        .unwrap()
        .unwrap();
    c.put("secure", "yes", None).await.unwrap();
    let got = c.get("secure", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"yes");

    // No client certificate, or one from another CA: refused.
    for id in [None, Some(&pki.stranger)] {
        let attempt = tokio::time::timeout(common::WAIT, async {
            let mut c = tls_client(addr, &pki.ca, id).await?;
            c.get("secure", None).await
        })
        .await
        .expect("bounded");
        assert!(
            attempt.is_err(),
            "request without a trusted client cert succeeded"
        );
    }

    // Plain HTTP on a TLS port is refused.
    let plain = tokio::time::timeout(common::WAIT, async {
        let mut c = Client::connect([common::endpoint(addr)], None).await?;
        c.get("secure", None).await
    })
    .await
    .expect("bounded");
    assert!(plain.is_err());

    // The real etcdctl with the same certificates.
    if Path::new(common::ETCDCTL).exists() {
        let ep = format!("https://{addr}");
        let args = vec![
            format!("--cacert={}", ca.display()),
            format!("--cert={}", client_crt.display()),
            format!("--key={}", client_key.display()),
        ];
        let out = common::etcdctl_async(ep, args, vec!["get".into(), "secure".into()]).await;
        assert_eq!(common::stdout(&out), "secure\nyes\n");
    }
    store.shutdown().await;
}

/// The real etcdctl over TLS with a client certificate, on the commands that open their own
/// per-endpoint connections (endpoint status/health/hashkv, also `--cluster`), member list,
/// snapshot save and a watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_over_tls_status_members_snapshot_and_watch() {
    if !Path::new(common::ETCDCTL).exists() {
        eprintln!("skipping: {} not installed", common::ETCDCTL);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = pki();
    let certs = dir.path().join("pki");
    std::fs::create_dir_all(&certs).unwrap();
    let ca = write(&certs, "ca.crt", &pki.ca);
    let server_crt = write(&certs, "server.crt", &pki.server.0);
    let server_key = write(&certs, "server.key", &pki.server.1);
    let client_crt = write(&certs, "client.crt", &pki.client.0);
    let client_key = write(&certs, "client.key", &pki.client.1);
    let mut config = common::config(&dir.path().join("data"));
    config.listen_client_urls = vec!["https://127.0.0.1:0".into()];
    config.advertise_client_urls = vec!["https://127.0.0.1:0".into()];
    config.cert_file = Some(server_crt);
    config.key_file = Some(server_key);
    config.client_cert_auth = true;
    config.trusted_ca_file = Some(ca.clone());
    let store = common::start_with(config).await;
    let ep = format!("https://{}", store.client_addr());
    let tls = vec![
        format!("--cacert={}", ca.display()),
        format!("--cert={}", client_crt.display()),
        format!("--key={}", client_key.display()),
    ];
    let run = |args: &[&str]| {
        common::etcdctl_async(
            ep.clone(),
            tls.clone(),
            args.iter().map(|a| a.to_string()).collect(),
        )
    };

    assert_eq!(
        common::stdout(&run(&["put", "/tls/a", "1"]).await).trim(),
        "OK"
    );
    let status = common::stdout(&run(&["endpoint", "status", "-w", "json"]).await);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status[0]["Endpoint"], ep.as_str(), "{status}");
    assert_eq!(
        status[0]["Status"]["leader"], status[0]["Status"]["header"]["member_id"],
        "{status}"
    );
    // --cluster dials the advertised https client URL.
    let cluster_status = common::stdout(&run(&["endpoint", "status", "--cluster"]).await);
    assert!(
        cluster_status.starts_with(&format!("{ep}, ")),
        "{cluster_status}"
    );
    let health = run(&["endpoint", "health", "--cluster"]).await;
    common::stdout(&health);
    assert!(
        String::from_utf8_lossy(&health.stderr).contains("is healthy"),
        "{health:?}"
    );
    let hashkv = common::stdout(&run(&["endpoint", "hashkv", "--cluster"]).await);
    assert!(hashkv.starts_with(&format!("{ep}, ")), "{hashkv}");
    let members = common::stdout(&run(&["member", "list"]).await);
    assert!(members.contains(&ep), "{members}");

    let snap = dir.path().join("tls.snap");
    let saved = run(&["snapshot", "save", &snap.display().to_string()]).await;
    assert!(
        common::stdout(&saved).contains("Snapshot saved"),
        "{saved:?}"
    );
    assert!(std::fs::metadata(&snap).unwrap().len() > 0);

    // A watch over TLS sees a later put.
    use std::io::{BufRead, BufReader};
    let mut child = common::KillOnDrop(
        std::process::Command::new(common::ETCDCTL)
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={ep}"))
            .args(&tls)
            .args(["watch", "/tls/a"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pipe = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Put until the watcher (whose start we cannot observe) reports it.
    let mut lines = Vec::new();
    for i in 0..50 {
        common::stdout(&run(&["put", "/tls/a", &format!("w{i}")]).await);
        while let Ok(l) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            lines.push(l);
        }
        if lines.len() >= 3 {
            break;
        }
    }
    assert!(lines.len() >= 3, "watch printed {lines:?}");
    assert_eq!(lines[0], "PUT");
    assert_eq!(lines[1], "/tls/a");
    assert!(lines[2].starts_with('w'), "{lines:?}");
    drop(child);
    store.shutdown().await;
}
