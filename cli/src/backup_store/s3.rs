//! Snapshot bundles in S3-compatible object storage: upload (multipart above one part, aborted on any
//! failure, so a key either holds a whole bundle or nothing), verification by reading the object back and
//! comparing its sha256 with the local file's, retention per uploader (`<prefix>/<host>/`: keep the newest
//! N, as each controller keeps N on its disk), listing and download for `snapshot list/restore`.
//!
//! object_store (Apache Arrow) speaks the protocol. Credentials come from a 0600 file (AWS shared-
//! credentials format) or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`; they are
//! handed to the client in memory only — never on a command line, in cluster.yaml or in a log line
//! (`Credentials`' Debug prints none of them).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as Key;
use object_store::{ClientOptions, ObjectStore, RetryConfig, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::BUNDLE_SUFFIX;
use crate::config::backup::S3Destination;

/// Where the scheduled job finds its credentials on a controller (0600, root).
pub const HOST_CREDENTIALS: &str = "/etc/kiln/s3.credentials";
/// Parts of a multipart upload (S3's minimum is 5 MiB but for the last part).
pub const PART_SIZE: usize = 8 << 20;
/// Parts in flight at once.
const CONCURRENCY: usize = 2;

#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error("s3 credentials {path}: {message}")]
    Credentials { path: PathBuf, message: String },
    #[error("s3: no credentials: give a credentials file (spec.store.backup.destination.s3.credentialsFile or --s3-credentials-file) or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")]
    NoCredentials,
    #[error("s3 bucket {bucket}: {message}")]
    Bucket { bucket: String, message: String },
    #[error("s3://{bucket}/{key}: {message}")]
    Object {
        bucket: String,
        key: String,
        message: String,
    },
    #[error("{0}: expected s3://bucket[/prefix]")]
    Url(String),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> S3Error {
    let path = path.to_path_buf();
    move |source| S3Error::Io { what, path, source }
}

/// An access key. Debug shows the key id's first four characters only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id: String = self.access_key_id.chars().take(4).collect();
        write!(f, "Credentials({id}…, secret redacted)")
    }
}

impl Credentials {
    /// A credentials file in AWS's shared format (`[default]` or no section; `aws_access_key_id = …`),
    /// refused unless only its owner may read it.
    pub fn from_file(path: &Path) -> Result<Credentials, S3Error> {
        let bad = |message: String| S3Error::Credentials {
            path: path.to_path_buf(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(bad(format!(
                "mode {mode:04o} lets others read it: chmod 600 {}",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Self::parse(&text).map_err(bad)
    }

    /// The shared-credentials text: the `[default]` profile, or the lines before any section.
    pub fn parse(text: &str) -> Result<Credentials, String> {
        let mut section = String::new();
        let mut found: BTreeMap<String, String> = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = s.trim().to_string();
                continue;
            }
            if !(section.is_empty() || section == "default") {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                // The line may hold a secret: say where it is, never what it says.
                return Err("a line is neither `[profile]` nor `key = value`".into());
            };
            found.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
        let get = |k: &str| found.get(k).filter(|v| !v.is_empty()).cloned();
        match (get("aws_access_key_id"), get("aws_secret_access_key")) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(Credentials {
                access_key_id,
                secret_access_key,
                session_token: get("aws_session_token"),
            }),
            _ => Err(
                "needs aws_access_key_id and aws_secret_access_key (in [default] or before any section)"
                    .into(),
            ),
        }
    }

    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and, when set, `AWS_SESSION_TOKEN`.
    pub fn from_env() -> Option<Credentials> {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Some(Credentials {
            access_key_id: get("AWS_ACCESS_KEY_ID")?,
            secret_access_key: get("AWS_SECRET_ACCESS_KEY")?,
            session_token: get("AWS_SESSION_TOKEN"),
        })
    }

    /// The file `init` installs on the controllers (the same format `from_file` reads).
    pub fn to_file_text(&self) -> String {
        let mut s = format!(
            "# managed by kiln: S3 credentials for scheduled snapshot uploads\n[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            self.access_key_id, self.secret_access_key
        );
        if let Some(t) = &self.session_token {
            s.push_str(&format!("aws_session_token = {t}\n"));
        }
        s
    }

    /// The file when one is named, else the environment.
    pub fn resolve(file: Option<&Path>) -> Result<Credentials, S3Error> {
        match file {
            Some(f) => Self::from_file(f),
            None => Self::from_env().ok_or(S3Error::NoCredentials),
        }
    }
}

/// `s3://bucket/prefix` → (bucket, prefix without slashes at either end).
pub fn parse_url(url: &str) -> Result<(String, String), S3Error> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| S3Error::Url(url.into()))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    crate::config::backup::check_bucket(bucket)
        .map_err(|why| S3Error::Url(format!("{url} (bucket: {why})")))?;
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

/// The key of a bundle uploaded by `host`: `<prefix>/<host>/<file name>`.
pub fn bundle_key(prefix: &str, host: &str, file_name: &str) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        format!("{host}/{file_name}")
    } else {
        format!("{prefix}/{host}/{file_name}")
    }
}

/// One object under the prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    /// Seconds since the epoch.
    pub modified: i64,
    pub size: u64,
}

/// The bundles retention removes: per uploader directory (the key's parent), all but the newest `keep`
/// (newest by upload time, then by key, whose name carries the bundle's creation time). Other objects
/// under the prefix are never touched.
pub fn expired(objects: &[Object], keep: usize) -> Vec<String> {
    let mut by_dir: BTreeMap<&str, Vec<&Object>> = BTreeMap::new();
    for o in objects.iter().filter(|o| o.key.ends_with(BUNDLE_SUFFIX)) {
        let dir = o.key.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        by_dir.entry(dir).or_default().push(o);
    }
    let mut out = vec![];
    for (_, mut v) in by_dir {
        v.sort_by(|a, b| (b.modified, &b.key).cmp(&(a.modified, &a.key)));
        out.extend(v.into_iter().skip(keep).map(|o| o.key.clone()));
    }
    out.sort();
    out
}

/// A bucket and a prefix with a client for them.
pub struct Bucket {
    store: AmazonS3,
    pub bucket: String,
    pub prefix: String,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

impl Bucket {
    pub fn open(dest: &S3Destination, creds: &Credentials) -> Result<Bucket, S3Error> {
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&dest.bucket)
            .with_region(&dest.region)
            .with_access_key_id(&creds.access_key_id)
            .with_secret_access_key(&creds.secret_access_key)
            // A few quick retries: a bucket that is down should fail the scheduled run, not hang it.
            .with_retry(RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(60),
                ..Default::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(10))
                    .with_timeout(Duration::from_secs(300))
                    .with_allow_http(dest.endpoint.starts_with("http://")),
            );
        if let Some(t) = &creds.session_token {
            b = b.with_token(t);
        }
        if !dest.endpoint.is_empty() {
            // S3-compatible services (MinIO, Ceph, moto) are addressed by path, not by a bucket subdomain.
            b = b
                .with_endpoint(dest.endpoint.trim_end_matches('/'))
                .with_virtual_hosted_style_request(false);
        }
        let store = b.build().map_err(|e| S3Error::Bucket {
            bucket: dest.bucket.clone(),
            message: e.to_string(),
        })?;
        Ok(Bucket {
            store,
            bucket: dest.bucket.clone(),
            prefix: dest.prefix.trim_matches('/').to_string(),
        })
    }

    fn object_err(&self, key: &str, e: impl std::fmt::Display) -> S3Error {
        S3Error::Object {
            bucket: self.bucket.clone(),
            key: key.to_string(),
            message: explain(&e.to_string()),
        }
    }

    /// Upload `file` to `key`: one PUT below a part, else a multipart upload aborted on failure; then the
    /// object is read back and its sha256 compared with the file's (a mismatch deletes the object).
    /// Returns the sha256.
    pub async fn upload(&self, file: &Path, key: &str) -> Result<String, S3Error> {
        let location = Key::from(key);
        let mut f = tokio::fs::File::open(file)
            .await
            .map_err(io("opening", file))?;
        let size = f.metadata().await.map_err(io("reading", file))?.len();
        let mut hash = Sha256::new();
        if size <= PART_SIZE as u64 {
            let mut data = Vec::with_capacity(size as usize);
            f.read_to_end(&mut data)
                .await
                .map_err(io("reading", file))?;
            hash.update(&data);
            self.store
                .put(&location, data.into())
                .await
                .map_err(|e| self.object_err(key, e))?;
        } else {
            let upload = self
                .store
                .put_multipart(&location)
                .await
                .map_err(|e| self.object_err(key, e))?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            let mut buf = vec![0u8; 1 << 20];
            let sent: Result<(), S3Error> = async {
                loop {
                    let n = f.read(&mut buf).await.map_err(io("reading", file))?;
                    if n == 0 {
                        return Ok(());
                    }
                    hash.update(&buf[..n]);
                    w.wait_for_capacity(CONCURRENCY)
                        .await
                        .map_err(|e| self.object_err(key, e))?;
                    w.write(&buf[..n]);
                }
            }
            .await;
            match sent {
                Ok(()) => {
                    if let Err(e) = w.finish().await {
                        // finish aborts the upload itself when a part failed; a failed completion leaves
                        // no object either.
                        return Err(self.object_err(key, e));
                    }
                }
                Err(e) => {
                    if let Err(a) = w.abort().await {
                        tracing::warn!(bucket = %self.bucket, key, error = %a, "aborting the multipart upload failed");
                    }
                    return Err(e);
                }
            }
        }
        let want = hex::encode(hash.finalize());
        let got = self.sha256(key).await?;
        if got != want {
            let _ = self.store.delete(&location).await;
            return Err(self.object_err(
                key,
                format!("uploaded object reads back with sha256 {got}, the file has {want}; the object was deleted"),
            ));
        }
        tracing::info!(bucket = %self.bucket, key, bytes = size, "bundle uploaded and verified");
        Ok(want)
    }

    /// The sha256 of an object, streamed.
    pub async fn sha256(&self, key: &str) -> Result<String, S3Error> {
        let got = self
            .store
            .get(&Key::from(key))
            .await
            .map_err(|e| self.object_err(key, e))?;
        let mut stream = got.into_stream();
        let mut hash = Sha256::new();
        while let Some(chunk) = stream
            .try_next()
            .await
            .map_err(|e| self.object_err(key, e))?
        {
            hash.update(&chunk);
        }
        Ok(hex::encode(hash.finalize()))
    }

    /// Every object under the prefix (all uploaders), bundles or not.
    pub async fn objects(&self) -> Result<Vec<Object>, S3Error> {
        let prefix = (!self.prefix.is_empty()).then(|| Key::from(self.prefix.as_str()));
        let metas: Vec<_> = self
            .store
            .list(prefix.as_ref())
            .try_collect()
            .await
            .map_err(|e| S3Error::Bucket {
                bucket: self.bucket.clone(),
                message: explain(&e.to_string()),
            })?;
        Ok(metas
            .into_iter()
            .map(|m| Object {
                key: m.location.to_string(),
                modified: m.last_modified.timestamp(),
                size: m.size,
            })
            .collect())
    }

    /// Keep the newest `keep` bundles of each uploader under the prefix; returns the keys deleted.
    pub async fn apply_retention(&self, keep: usize) -> Result<Vec<String>, S3Error> {
        let gone = expired(&self.objects().await?, keep);
        for key in &gone {
            self.store
                .delete(&Key::from(key.as_str()))
                .await
                .map_err(|e| self.object_err(key, e))?;
            tracing::info!(bucket = %self.bucket, key, "old bundle removed (retention)");
        }
        Ok(gone)
    }

    /// Download `key` into `dir` (created 0700) as a 0600 file named like the key's last part, written to
    /// a temporary name first so a broken download leaves nothing that looks like a bundle.
    pub async fn download(&self, key: &str, dir: &Path) -> Result<PathBuf, S3Error> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("creating", dir))?;
        let name = key.rsplit('/').next().unwrap_or(key);
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.partial"));
        let got = self
            .store
            .get(&Key::from(key))
            .await
            .map_err(|e| self.object_err(key, e))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("creating", &tmp))?;
        let mut stream = got.into_stream();
        let written: Result<(), S3Error> = async {
            while let Some(chunk) = stream
                .try_next()
                .await
                .map_err(|e| self.object_err(key, e))?
            {
                f.write_all(&chunk).map_err(io("writing", &tmp))?;
            }
            f.sync_all().map_err(io("syncing", &tmp))
        }
        .await;
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &path).map_err(io("renaming", &tmp))?;
        Ok(path)
    }
}

/// object_store's errors name the HTTP status; say what it means for the operator.
fn explain(message: &str) -> String {
    let hint = if message.contains("InvalidAccessKeyId")
        || message.contains("SignatureDoesNotMatch")
        || message.contains("403")
        || message.contains("Forbidden")
    {
        " (the credentials were refused: check the access key id and secret)"
    } else if message.contains("NoSuchBucket") {
        " (no such bucket)"
    } else {
        ""
    };
    format!("{message}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_credentials_files_parse() {
        let c = Credentials::parse(
            "# mine\n[other]\naws_access_key_id = NO\n[default]\naws_access_key_id = AKIA1\naws_secret_access_key = s3cr3t/x=\n",
        )
        .unwrap();
        assert_eq!(c.access_key_id, "AKIA1");
        assert_eq!(c.secret_access_key, "s3cr3t/x=");
        assert_eq!(c.session_token, None);
        let plain = Credentials::parse(
            "aws_access_key_id=A\naws_secret_access_key=B\naws_session_token=T\n",
        )
        .unwrap();
        assert_eq!(plain.session_token.as_deref(), Some("T"));
        assert_eq!(Credentials::parse(&plain.to_file_text()).unwrap(), plain);
        assert!(Credentials::parse("[default]\naws_access_key_id = A\n").is_err());
        let e = Credentials::parse("AKIA s3cr3t\n").unwrap_err();
        assert!(!e.contains("s3cr3t"), "{e}");
        assert!(!format!("{plain:?}").contains('B'));
    }

    #[test]
    fn a_readable_credentials_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("creds");
        std::fs::write(&p, "aws_access_key_id=A\naws_secret_access_key=B\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Credentials::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("mode 0644") && e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Credentials::from_file(&p).unwrap().access_key_id, "A");
    }

    #[test]
    fn urls_and_keys() {
        assert_eq!(
            parse_url("s3://kiln-backups/prod/").unwrap(),
            ("kiln-backups".into(), "prod".into())
        );
        assert_eq!(
            parse_url("s3://kiln-backups").unwrap(),
            ("kiln-backups".into(), "".into())
        );
        assert!(parse_url("kiln-backups/prod").is_err());
        assert!(parse_url("s3://Bad_Bucket/x").is_err());
        assert_eq!(
            bundle_key("/prod/", "c1", "k-20261206T1121-r5.kiln-bundle.tar"),
            "prod/c1/k-20261206T1121-r5.kiln-bundle.tar"
        );
        assert_eq!(
            bundle_key("", "c1", "b.kiln-bundle.tar"),
            "c1/b.kiln-bundle.tar"
        );
    }

    /// moto_server on a free port of 127.0.0.1; killed on drop. With `auth` it checks signatures and access
    /// keys — but moto 5 then also refuses any request whose query holds a '/' (its own signature check
    /// decodes the query first; boto3's `list_objects_v2(Prefix="a/")` fails the same way), so listing
    /// under a prefix is tested on a server without it.
    struct Moto {
        child: std::process::Child,
        endpoint: String,
        creds: Credentials,
    }

    impl Drop for Moto {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn moto(auth: bool) -> Moto {
        use std::io::Write;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cmd = std::process::Command::new("moto_server");
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        if auth {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", "4");
        }
        let child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect(
                "moto_server (python3 -m pip install 'moto[server]'; .ci/install-packages does)",
            );
        let endpoint = format!("http://127.0.0.1:{port}");
        let mut m = Moto {
            child,
            endpoint,
            creds: Credentials::parse("aws_access_key_id=-\naws_secret_access_key=-").unwrap(),
        };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut setup = std::process::Command::new("python3")
            .args(["-", &m.endpoint])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        setup
            .stdin
            .take()
            .unwrap()
            .write_all(include_bytes!("testdata/moto_setup.py"))
            .unwrap();
        let out = setup.wait_with_output().unwrap();
        assert!(out.status.success());
        m.creds = Credentials::parse(&String::from_utf8(out.stdout).unwrap()).unwrap();
        m
    }

    /// The bucket and prefix both moto tests use.
    fn unit_destination(endpoint: &str) -> S3Destination {
        S3Destination {
            endpoint: endpoint.to_string(),
            bucket: "kiln-backups".into(),
            prefix: "unit".into(),
            region: "us-east-1".into(),
            credentials_file: None,
        }
    }

    #[test]
    #[ignore = "needs moto_server (.ci/install-packages installs it; CI runs it with --include-ignored)"]
    fn multipart_upload_verify_retention_download_on_a_real_s3_server() {
        let m = moto(false);
        let dest = unit_destination(&m.endpoint);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let b = Bucket::open(&dest, &m.creds).unwrap();
        let d = tempfile::tempdir().unwrap();
        // Three parts (8 + 8 + 4 MiB) of bytes that differ from part to part.
        let big: Vec<u8> = (0..20u32 << 20).map(|i| (i / 7 % 251) as u8).collect();
        let file = d.path().join("big.kiln-bundle.tar");
        std::fs::write(&file, &big).unwrap();
        let keys: Vec<String> = (1..=3)
            .map(|i| {
                bundle_key(
                    "unit",
                    "c1",
                    &format!("t-2026120{i}T000000-r{i}{BUNDLE_SUFFIX}"),
                )
            })
            .collect();
        let want = hex::encode(Sha256::digest(&big));
        for k in &keys {
            assert_eq!(rt.block_on(b.upload(&file, k)).unwrap(), want);
        }
        let small = d.path().join("small.kiln-bundle.tar");
        std::fs::write(&small, b"a small bundle").unwrap();
        let other = bundle_key(
            "unit",
            "c2",
            &format!("t-20261201T000000-r1{BUNDLE_SUFFIX}"),
        );
        rt.block_on(b.upload(&small, &other)).unwrap();
        let listed = rt.block_on(b.objects()).unwrap();
        assert_eq!(listed.len(), 4, "{listed:?}");
        assert!(listed
            .iter()
            .any(|o| o.key == keys[0] && o.size == big.len() as u64));
        // Keep 1 per uploader: c1's two older bundles go, c2's only one stays.
        let gone = rt.block_on(b.apply_retention(1)).unwrap();
        assert_eq!(gone, [keys[0].clone(), keys[1].clone()]);
        let left: Vec<String> = rt
            .block_on(b.objects())
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(left, [keys[2].clone(), other.clone()]);
        let got = rt
            .block_on(b.download(&keys[2], &d.path().join("dl")))
            .unwrap();
        assert_eq!(std::fs::read(&got).unwrap(), big);
        let mode = std::fs::metadata(&got).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    #[ignore = "needs moto_server (.ci/install-packages installs it; CI runs it with --include-ignored)"]
    fn a_wrong_secret_is_refused_with_a_clear_error_that_holds_no_secret() {
        let m = moto(true);
        let dest = unit_destination(&m.endpoint);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("b.kiln-bundle.tar");
        std::fs::write(&file, b"bundle").unwrap();
        let key = bundle_key("unit", "c1", "b.kiln-bundle.tar");
        let right = Bucket::open(&dest, &m.creds).unwrap();
        rt.block_on(right.upload(&file, &key)).unwrap();
        let wrong = Credentials {
            secret_access_key: "not-the-secret".into(),
            ..m.creds.clone()
        };
        let e = rt
            .block_on(Bucket::open(&dest, &wrong).unwrap().upload(&file, &key))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s3://kiln-backups/unit/c1/b.kiln-bundle.tar: ")
                && e.contains("credentials were refused"),
            "{e}"
        );
        assert!(
            !e.contains(&m.creds.secret_access_key) && !e.contains("not-the-secret"),
            "{e}"
        );
        // The refused upload changed nothing.
        assert_eq!(
            rt.block_on(right.sha256(&key)).unwrap(),
            hex::encode(Sha256::digest(b"bundle"))
        );
    }

    #[test]
    fn retention_keeps_the_newest_per_uploader() {
        let o = |key: &str, modified| Object {
            key: key.into(),
            modified,
            size: 1,
        };
        let objects = [
            o("p/c1/a-1.kiln-bundle.tar", 10),
            o("p/c1/a-3.kiln-bundle.tar", 30),
            o("p/c1/a-2.kiln-bundle.tar", 20),
            o("p/c2/a-1.kiln-bundle.tar", 15),
            o("p/c2/a-2.kiln-bundle.tar", 15),
            o("p/c1/notes.txt", 1),
        ];
        assert_eq!(
            expired(&objects, 2),
            ["p/c1/a-1.kiln-bundle.tar".to_string()]
        );
        // Same upload second: the key (the bundle's creation time) decides.
        assert_eq!(
            expired(&objects, 1),
            [
                "p/c1/a-1.kiln-bundle.tar",
                "p/c1/a-2.kiln-bundle.tar",
                "p/c2/a-1.kiln-bundle.tar"
            ]
        );
        assert!(expired(&objects, 5).is_empty());
    }
}
