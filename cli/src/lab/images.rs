//! kiln's test images, built locally and reproducibly (no image is ever downloaded): single-layer OCI
//! image-layout archives with fixed timestamps and ordering, so the same inputs give the same digests.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::exec::{cmd, run};
use super::layout::write_file;
use super::LabError;

/// Shared by every lab: the images are the same for all of them.
pub const IMAGE_CACHE: &str = "/var/cache/kiln-lab/images";
const PAUSE_SOURCE: &str = include_str!("pause.c");

/// An image to be pushed to the lab registry as `kiln/<name>:<tag>`.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub name: &'static str,
    pub tag: &'static str,
    pub archive: PathBuf,
}

impl BuiltImage {
    pub fn reference(&self, registry: &str) -> String {
        format!("{registry}/kiln/{}:{}", self.name, self.tag)
    }
}

/// One file in the layer.
enum Entry {
    Dir(String, u32),
    File(String, Vec<u8>, u32),
    Symlink(String, String),
}

struct ImageSpec {
    name: &'static str,
    tag: &'static str,
    entries: Vec<Entry>,
    /// The config's Entrypoint (empty: none, and the field is left out); a pod's `command` replaces it.
    entrypoint: Vec<&'static str>,
    /// The config's Cmd: the entrypoint's arguments, or the command without one; a pod's `args`
    /// replace it.
    cmd: Vec<&'static str>,
}

type Build = fn(&Path) -> Result<ImageSpec, LabError>;

/// Every lab's images.
const DEFAULT: &[(&str, &str, Build)] =
    &[("pause", "1", pause_spec), ("busybox", "1", busybox_spec)];
/// Images a lab gets only when asked (`kiln lab up --image NAME`): each carries tens of MB. agnhost is
/// one of them: kiln's debug build of it is ~30 MB (plus glibc), too much to push into every lab that
/// never runs the conformance tests.
const EXTRA: &[(&str, &str, Build)] = &[
    ("dnsutils", "1", dnsutils_spec),
    ("kubectl", "1", kubectl_spec),
    ("agnhost", "1", agnhost_spec),
];
pub const EXTRA_NAMES: &[&str] = &["dnsutils", "kubectl", "agnhost"];

/// The default images and the named extras, built into the shared cache once (an archive that exists
/// is not rebuilt, so its inputs are read only the first time).
pub fn ensure_images(extra: &[String]) -> Result<Vec<BuiltImage>, LabError> {
    let dir = Path::new(IMAGE_CACHE);
    std::fs::create_dir_all(dir).map_err(LabError::io("creating image cache", dir))?;
    let wanted = DEFAULT.iter().chain(
        EXTRA
            .iter()
            .filter(|(n, _, _)| extra.iter().any(|e| e == n)),
    );
    let mut out = Vec::new();
    for (name, tag, build) in wanted {
        let archive = dir.join(format!("{name}-{tag}.oci.tar"));
        if !archive.exists() || built_binary_is_newer(name, &archive) {
            let spec = build(dir)?;
            let bytes = build_archive(&spec)?;
            write_file(&archive, &bytes, 0o644)?;
        }
        out.push(BuiltImage { name, tag, archive });
    }
    Ok(out)
}

/// agnhost is built by this workspace, so it changes while its tag does not: its archive is rebuilt
/// whenever the binary is newer than it, or this `kiln` (whose [`agnhost_spec`] shapes the image) is
/// (the other images' inputs are the machine's own packages).
fn built_binary_is_newer(name: &str, archive: &Path) -> bool {
    if name != "agnhost" {
        return false;
    }
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(arc) = modified(archive) else {
        return false;
    };
    let kiln = std::env::current_exe().ok();
    [agnhost_binary(), kiln]
        .iter()
        .flatten()
        .filter_map(|p| modified(p))
        .any(|built| built > arc)
}

/// kiln's agnhost binary, found as the bootstrapper finds kiln-kubelet and the other components: next
/// to the running `kiln` (the same cargo target directory, CARGO_TARGET_DIR or `target/`).
fn agnhost_binary() -> Option<PathBuf> {
    let p = std::env::current_exe().ok()?.parent()?.join("agnhost");
    p.is_file().then_some(p)
}

fn pause_spec(cache: &Path) -> Result<ImageSpec, LabError> {
    let bin = cache.join("pause");
    if !bin.exists() {
        let src = cache.join("pause.c");
        write_file(&src, PAUSE_SOURCE.as_bytes(), 0o644)?;
        run(&mut cmd(
            "gcc",
            &[
                "-static",
                "-Os",
                "-s",
                "-o",
                &bin.to_string_lossy(),
                &src.to_string_lossy(),
            ],
        ))
        .map_err(|e| LabError::Image {
            image: "pause".into(),
            reason: format!("{e} (needs gcc and libc6-dev)"),
        })?;
    }
    let data = std::fs::read(&bin).map_err(LabError::io("reading", &bin))?;
    Ok(ImageSpec {
        name: "pause",
        tag: "1",
        entries: vec![Entry::File("pause".into(), data, 0o755)],
        entrypoint: vec![],
        cmd: vec!["/pause"],
    })
}

/// busybox (static) with every applet, and httpd serving /www: the lab's general-purpose workload image.
fn busybox_spec(_cache: &Path) -> Result<ImageSpec, LabError> {
    Ok(ImageSpec {
        name: "busybox",
        tag: "1",
        entries: busybox_entries("busybox")?,
        entrypoint: vec![],
        cmd: vec!["/bin/httpd", "-f", "-p", "80", "-h", "/www"],
    })
}

/// busybox plus the machine's real `dig` (bind9-dnsutils) with the shared libraries it links: DNS
/// tests query with the client operators use, not only busybox's nslookup.
fn dnsutils_spec(_cache: &Path) -> Result<ImageSpec, LabError> {
    let mut entries = busybox_entries("dnsutils")?;
    entries.extend(binary_with_libraries(
        "dnsutils",
        "/usr/bin/dig",
        "usr/bin/dig",
        "bind9-dnsutils",
    )?);
    Ok(ImageSpec {
        name: "dnsutils",
        tag: "1",
        entries,
        entrypoint: vec![],
        cmd: vec!["/bin/sleep", "3600"],
    })
}

/// busybox plus the real kubectl (the one on the machine's PATH): a pod runs it with only its
/// ServiceAccount, which is client-go's in-cluster configuration.
fn kubectl_spec(_cache: &Path) -> Result<ImageSpec, LabError> {
    let path = which("kubectl").ok_or_else(|| LabError::Image {
        image: "kubectl".into(),
        reason: "kubectl is not on the PATH".into(),
    })?;
    let mut entries = busybox_entries("kubectl")?;
    entries.extend(binary_with_libraries(
        "kubectl",
        &path,
        "usr/bin/kubectl",
        "kubectl",
    )?);
    Ok(ImageSpec {
        name: "kubectl",
        tag: "1",
        entries,
        entrypoint: vec![],
        cmd: vec!["/bin/sleep", "3600"],
    })
}

/// kiln's agnhost (images/agnhost) at /agnhost with the shared libraries it links, on the busybox
/// layer, with upstream's e2e-test-images/agnhost Dockerfile's `ENTRYPOINT ["/agnhost"]` and
/// `CMD ["pause"]`: pods give the subcommand as args (`args: [netexec, --http-port=8080]`, as
/// upstream's NewAgnhostContainer), a pod giving neither just pauses, and tests exec busybox tools in
/// it.
fn agnhost_spec(_cache: &Path) -> Result<ImageSpec, LabError> {
    let bin = agnhost_binary().ok_or_else(|| LabError::Image {
        image: "agnhost".into(),
        reason: "no agnhost binary next to kiln (cargo build --workspace, or -p kiln-agnhost)"
            .into(),
    })?;
    let mut entries = busybox_entries("agnhost")?;
    entries.extend(binary_with_libraries(
        "agnhost",
        &bin.to_string_lossy(),
        "agnhost",
        "kiln-agnhost",
    )?);
    // Upstream's Dockerfile: `RUN ln -s agnhost agnhost-2`, a second name tests put in a pod's
    // `command` to see it replace the image's entrypoint (entrypoint-tester prints its argv).
    entries.push(Entry::Symlink("agnhost-2".into(), "agnhost".into()));
    // Upstream's image also carries `localhost.crt`/`localhost.key` at /, which porter's and netexec's
    // TLS listeners read by default (the proxy conformance test serves https from them).
    let (cert, key) = localhost_tls().map_err(|e| LabError::Image {
        image: "agnhost".into(),
        reason: format!("making the localhost certificate: {e}"),
    })?;
    entries.push(Entry::File(
        "localhost.crt".into(),
        cert.into_bytes(),
        0o644,
    ));
    entries.push(Entry::File("localhost.key".into(), key.into_bytes(), 0o644));
    Ok(ImageSpec {
        name: "agnhost",
        tag: "1",
        entries,
        entrypoint: vec!["/agnhost"],
        cmd: vec!["pause"],
    })
}

/// A self-signed certificate for `localhost` and its key, PEM (test fixtures inside the lab's image, as
/// upstream ships fixed ones in agnhost; nothing trusts them).
fn localhost_tls() -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn which(program: &str) -> Option<String> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
            .and_then(|p| std::fs::canonicalize(p).ok())
            .map(|p| p.to_string_lossy().into_owned())
    })
}

/// `binary` at `dest` in the image, and every shared library `ldd` names (with the dynamic loader) at
/// its own path, symlinks resolved. A static binary (kubectl) brings only itself.
fn binary_with_libraries(
    image: &str,
    binary: &str,
    dest: &str,
    package: &str,
) -> Result<Vec<Entry>, LabError> {
    let fail = |reason: String| LabError::Image {
        image: image.into(),
        reason,
    };
    let read = |p: &str| {
        std::fs::read(p).map_err(|e| fail(format!("{p}: {e} (apt-get install {package})")))
    };
    let mut entries = vec![Entry::File(dest.to_string(), read(binary)?, 0o755)];
    let ldd = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| fail(format!("ldd {binary}: {e}")))?;
    // "not a dynamic executable" (exit 1) means a static binary: nothing else to bring.
    let text = String::from_utf8_lossy(&ldd.stdout);
    let mut libs: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| path.to_string())
        })
        .collect();
    libs.sort();
    libs.dedup();
    let mut dirs = std::collections::BTreeSet::new();
    for lib in &libs {
        let mut d = Path::new(lib).parent();
        while let Some(p) = d.filter(|p| *p != Path::new("/")) {
            dirs.insert(p.to_string_lossy().trim_start_matches('/').to_string());
            d = p.parent();
        }
    }
    for d in dirs {
        // busybox_entries already has some of these; a repeated directory entry is harmless in a layer
        // but keep the tar tidy.
        if ![
            "bin", "dev", "etc", "proc", "run", "sys", "tmp", "www", "usr", "usr/bin",
        ]
        .contains(&d.as_str())
        {
            entries.push(Entry::Dir(d, 0o755));
        }
    }
    for lib in libs {
        let real = std::fs::canonicalize(&lib).map_err(|e| fail(format!("{lib}: {e}")))?;
        let data = std::fs::read(&real).map_err(|e| fail(format!("{}: {e}", real.display())))?;
        entries.push(Entry::File(
            lib.trim_start_matches('/').to_string(),
            data,
            0o755,
        ));
    }
    Ok(entries)
}

/// The busybox layer every workload image starts from: /bin with every applet, /etc/passwd and group,
/// and /www/index.html for httpd.
fn busybox_entries(image: &str) -> Result<Vec<Entry>, LabError> {
    let bb = Path::new("/bin/busybox");
    let data = std::fs::read(bb).map_err(|e| LabError::Image {
        image: image.into(),
        reason: format!("{}: {e} (apt-get install busybox-static)", bb.display()),
    })?;
    let list = run(&mut cmd("/bin/busybox", &["--list"]))?;
    let mut applets: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .split_whitespace()
        .filter(|a| *a != "busybox")
        .map(str::to_string)
        .collect();
    applets.sort();
    applets.dedup();
    let mut entries = vec![];
    for (d, mode) in [
        ("bin", 0o755),
        ("dev", 0o755),
        ("etc", 0o755),
        ("proc", 0o755),
        ("run", 0o755),
        ("sys", 0o755),
        ("tmp", 0o1777),
        ("usr", 0o755),
        ("usr/bin", 0o755),
        ("www", 0o755),
    ] {
        entries.push(Entry::Dir(d.into(), mode));
    }
    entries.push(Entry::File("bin/busybox".into(), data, 0o755));
    for a in applets {
        entries.push(Entry::Symlink(format!("bin/{a}"), "busybox".into()));
    }
    entries.push(Entry::File(
        "etc/passwd".into(),
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n".to_vec(),
        0o644,
    ));
    entries.push(Entry::File(
        "etc/group".into(),
        b"root:x:0:\nnogroup:x:65534:\n".to_vec(),
        0o644,
    ));
    entries.push(Entry::File(
        "www/index.html".into(),
        b"hello from kiln\n".to_vec(),
        0o644,
    ));
    Ok(entries)
}

fn header(path: &str, size: u64, mode: u32, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    let _ = h.set_path(path);
    h
}

fn image_err(spec: &str, e: std::io::Error) -> LabError {
    LabError::Image {
        image: spec.to_string(),
        reason: e.to_string(),
    }
}

fn layer_tar(spec: &ImageSpec) -> Result<Vec<u8>, LabError> {
    let mut b = tar::Builder::new(Vec::new());
    for e in &spec.entries {
        let r = match e {
            Entry::Dir(p, mode) => {
                let mut h = header(&format!("{p}/"), 0, *mode, tar::EntryType::Directory);
                h.set_cksum();
                b.append(&h, std::io::empty())
            }
            Entry::File(p, data, mode) => {
                let mut h = header(p, data.len() as u64, *mode, tar::EntryType::Regular);
                h.set_cksum();
                b.append(&h, data.as_slice())
            }
            Entry::Symlink(p, target) => {
                let mut h = header(p, 0, 0o777, tar::EntryType::Symlink);
                let _ = h.set_link_name(target);
                h.set_cksum();
                b.append(&h, std::io::empty())
            }
        };
        r.map_err(|e| image_err(spec.name, e))?;
    }
    b.into_inner().map_err(|e| image_err(spec.name, e))
}

fn digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn build_archive(spec: &ImageSpec) -> Result<Vec<u8>, LabError> {
    let layer = layer_tar(spec)?;
    let layer_digest = digest(&layer);
    let mut image_config = serde_json::json!({
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "Cmd": spec.cmd,
        "WorkingDir": "/",
    });
    if !spec.entrypoint.is_empty() {
        image_config["Entrypoint"] = serde_json::json!(spec.entrypoint);
    }
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "kiln lab images"}],
    });
    let config = serde_json::to_vec(&config).expect("json");
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    }))
    .expect("json");
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(&manifest),
            "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": format!("kiln.local/{}:{}", spec.name, spec.tag),
                "org.opencontainers.image.ref.name": spec.tag,
            },
        }],
    }))
    .expect("json");
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |path: String, data: &[u8]| -> Result<(), LabError> {
        let mut h = header(&path, data.len() as u64, 0o644, tar::EntryType::Regular);
        h.set_cksum();
        b.append(&h, data).map_err(|e| image_err(spec.name, e))
    };
    for blob in [&layer, &config, &manifest] {
        let d = digest(blob);
        add(format!("blobs/sha256/{}", &d["sha256:".len()..]), blob)?;
    }
    add("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json".into(), &index)?;
    b.into_inner().map_err(|e| image_err(spec.name, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_image_names_are_the_table_s() {
        let names: Vec<&str> = EXTRA.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(names, EXTRA_NAMES);
    }

    fn spec() -> ImageSpec {
        ImageSpec {
            name: "t",
            tag: "1",
            entries: vec![
                Entry::Dir("bin".into(), 0o755),
                Entry::File("bin/x".into(), b"hello".to_vec(), 0o755),
                Entry::Symlink("bin/y".into(), "x".into()),
            ],
            entrypoint: vec![],
            cmd: vec!["/bin/x"],
        }
    }

    /// The image config blob of an archive.
    fn image_config(bytes: &[u8]) -> serde_json::Value {
        let mut blobs = std::collections::HashMap::new();
        for e in tar::Archive::new(bytes).entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = vec![];
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            blobs.insert(path, data);
        }
        let blob = |d: &str| &blobs[&format!("blobs/sha256/{}", &d["sha256:".len()..])];
        let index: serde_json::Value = serde_json::from_slice(&blobs["index.json"]).unwrap();
        let manifest: serde_json::Value =
            serde_json::from_slice(blob(index["manifests"][0]["digest"].as_str().unwrap()))
                .unwrap();
        serde_json::from_slice(blob(manifest["config"]["digest"].as_str().unwrap())).unwrap()
    }

    #[test]
    fn the_entrypoint_is_in_the_config_only_when_the_image_has_one() {
        let config = image_config(&build_archive(&spec()).unwrap());
        assert_eq!(config["config"]["Cmd"], serde_json::json!(["/bin/x"]));
        assert!(config["config"].get("Entrypoint").is_none());
        // agnhost's shape: upstream's Dockerfile ENTRYPOINT and CMD.
        let agnhost = ImageSpec {
            entrypoint: vec!["/agnhost"],
            cmd: vec!["pause"],
            ..spec()
        };
        let config = image_config(&build_archive(&agnhost).unwrap());
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/agnhost"])
        );
        assert_eq!(config["config"]["Cmd"], serde_json::json!(["pause"]));
    }

    #[test]
    fn archives_are_reproducible() {
        assert_eq!(
            build_archive(&spec()).unwrap(),
            build_archive(&spec()).unwrap()
        );
    }

    #[test]
    fn archive_is_an_oci_layout_whose_blobs_match_their_digests() {
        let bytes = build_archive(&spec()).unwrap();
        let mut ar = tar::Archive::new(bytes.as_slice());
        let mut names = vec![];
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = vec![];
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            if let Some(hexd) = path.strip_prefix("blobs/sha256/") {
                assert_eq!(digest(&data), format!("sha256:{hexd}"));
            }
            names.push(path);
        }
        assert!(names.contains(&"index.json".to_string()));
        assert!(names.contains(&"oci-layout".to_string()));
        assert_eq!(names.iter().filter(|n| n.starts_with("blobs/")).count(), 3);
    }
}
