//! `kiln snapshot restore` on a cluster whose store is an external etcd (`spec.store.external`): kiln
//! does not own those members, so it restores nothing and prints the etcd operator's steps instead —
//! `etcdctl snapshot restore` per member into a new data directory, as etcd's disaster-recovery guide
//! has it — around the part kiln owns (its API servers stopped meanwhile). The bundle's snapshot is
//! written beside the bundle for those steps; member names and peer URLs come from the cluster's
//! MemberList when it answers, else they are placeholders.

use std::path::{Path, PathBuf};

use super::bundle::Bundle;
use super::SnapshotError;
use crate::backup_store::encrypt::KeyMaterial;
use crate::bootstrap::phases::external_etcd::StoreAccess;
use crate::bootstrap::Context;

/// A member as the steps name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub name: String,
    pub peer_url: String,
}

/// The members of the external cluster, from the first endpoint that answers MemberList.
async fn members(ctx: &Context) -> Option<Vec<MemberView>> {
    for a in StoreAccess::for_cluster(ctx) {
        let Ok(mut c) = a.connect(std::time::Duration::from_secs(5)).await else {
            continue;
        };
        let Ok(Ok(list)) =
            tokio::time::timeout(std::time::Duration::from_secs(5), c.member_list()).await
        else {
            continue;
        };
        return Some(
            list.members()
                .iter()
                .map(|m| MemberView {
                    name: m.name().to_string(),
                    peer_url: m.peer_urls().first().cloned().unwrap_or_default(),
                })
                .collect(),
        );
    }
    None
}

/// Where the bundle's snapshot is written for the operator: beside the bundle, `<bundle>.snapshot.db`.
pub fn snapshot_path(bundle: &Path) -> PathBuf {
    let mut name = bundle.file_name().unwrap_or_default().to_os_string();
    name.push(".snapshot.db");
    bundle.with_file_name(name)
}

/// Opens the bundle, writes its snapshot beside it (0600) and returns the steps to print.
pub async fn steps(
    ctx: &Context,
    bundle_path: &Path,
    key: Option<&KeyMaterial>,
) -> Result<String, SnapshotError> {
    let bundle = Bundle::open(bundle_path, key)?;
    let db = snapshot_path(bundle_path);
    let data =
        std::fs::read(bundle.snapshot()).map_err(super::io("reading", &bundle.snapshot()))?;
    kiln_pki::files::write_atomic(&db, &data, 0o600).map_err(|e| SnapshotError::Bundle {
        path: db.clone(),
        message: e.to_string(),
    })?;
    let members = members(ctx).await;
    let token = format!(
        "{}-restore-{}",
        ctx.cluster.config.metadata.name,
        time::OffsetDateTime::now_utc().unix_timestamp()
    );
    let controllers: Vec<String> = ctx
        .cluster
        .config
        .controllers()
        .map(|h| h.name.clone())
        .collect();
    Ok(render(&RestoreSteps {
        snapshot: &db,
        revision: bundle.info.revision,
        objects: bundle.info.registry_objects,
        sha256: &bundle.info.snapshot_sha256,
        endpoints: ctx
            .cluster
            .config
            .spec
            .store
            .external
            .as_ref()
            .map(|e| e.endpoints.join(","))
            .unwrap_or_default(),
        members: members.as_deref(),
        token: &token,
        controllers: &controllers,
        cluster_file: &ctx.cluster.path,
    }))
}

pub struct RestoreSteps<'a> {
    pub snapshot: &'a Path,
    pub revision: i64,
    pub objects: i64,
    pub sha256: &'a str,
    pub endpoints: String,
    /// None: the cluster did not answer MemberList.
    pub members: Option<&'a [MemberView]>,
    pub token: &'a str,
    pub controllers: &'a [String],
    pub cluster_file: &'a Path,
}

/// The text: pure, so its content is tested without a cluster.
pub fn render(s: &RestoreSteps<'_>) -> String {
    let db = s.snapshot.display();
    let file = s.cluster_file.display();
    let mut out = format!(
        "kiln restored nothing: the store is the external etcd {} (spec.store.external), whose members \
         kiln does not own.\n\
         The bundle's snapshot (revision {}, {} objects, sha256 {}) is {db}.\n\
         To restore it, as the etcd cluster's operator:\n\n",
        s.endpoints, s.revision, s.objects, s.sha256
    );
    let hosts = s.controllers.join(" ");
    out.push_str(&format!(
        "1. Stop kiln's API servers, so nothing writes meanwhile (on each controller: {hosts}):\n   \
         mv /etc/kiln/manifests/kiln-apiserver.yaml /etc/kiln/kiln-apiserver.yaml.stopped\n\n\
         2. Stop every etcd member.\n\n\
         3. Copy {db} to each member and restore it there into a new data directory:\n"
    ));
    let fallback = [MemberView {
        name: "<member name>".into(),
        peer_url: "<its peer URL, https://…:2380>".into(),
    }];
    let (members, known) = match s.members {
        Some(m) if !m.is_empty() => (m, true),
        _ => (&fallback[..], false),
    };
    let initial: Vec<String> = members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url))
        .collect();
    let initial = if known {
        initial.join(",")
    } else {
        "<name1>=<peer URL 1>,<name2>=<peer URL 2>,…".into()
    };
    for m in members {
        out.push_str(&format!(
            "   ETCDCTL_API=3 etcdctl snapshot restore snapshot.db --name {} \\\n     \
             --initial-cluster {initial} \\\n     --initial-cluster-token {} \\\n     \
             --initial-advertise-peer-urls {} --data-dir <new data dir>\n",
            m.name, s.token, m.peer_url
        ));
    }
    if !known {
        out.push_str(
            "   (the cluster did not answer MemberList: fill in each member's name and peer URL)\n",
        );
    }
    out.push_str(&format!(
        "\n4. Start each member on its new data directory (--data-dir), with its usual flags.\n\n\
         5. Start kiln's API servers again (on each controller):\n   \
         mv /etc/kiln/kiln-apiserver.yaml.stopped /etc/kiln/manifests/kiln-apiserver.yaml\n\n\
         6. Check: kiln status -f {file}\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(members: Option<&[MemberView]>) -> String {
        render(&RestoreSteps {
            snapshot: Path::new("/b/x.kiln-bundle.tar.snapshot.db"),
            revision: 42,
            objects: 7,
            sha256: "ab",
            endpoints: "https://10.0.0.1:2379".into(),
            members,
            token: "c-restore-1",
            controllers: &["host1".into()],
            cluster_file: Path::new("cluster.yaml"),
        })
    }

    #[test]
    fn every_member_gets_its_etcdctl_restore_with_the_whole_cluster() {
        let m = [
            MemberView {
                name: "e1".into(),
                peer_url: "https://10.0.0.1:2380".into(),
            },
            MemberView {
                name: "e2".into(),
                peer_url: "https://10.0.0.2:2380".into(),
            },
        ];
        let t = steps(Some(&m));
        assert!(t.starts_with("kiln restored nothing"), "{t}");
        assert_eq!(t.matches("etcdctl snapshot restore").count(), 2, "{t}");
        assert_eq!(
            t.matches("--initial-cluster e1=https://10.0.0.1:2380,e2=https://10.0.0.2:2380 ")
                .count(),
            2,
            "{t}"
        );
        assert!(t.contains("--name e2 "), "{t}");
        assert!(
            t.contains("--initial-advertise-peer-urls https://10.0.0.2:2380"),
            "{t}"
        );
        assert!(t.contains("revision 42, 7 objects"), "{t}");
        // kiln's own part comes first and last: the API servers stopped, then started again.
        let stop = t.find("kiln-apiserver.yaml.stopped").unwrap();
        assert!(stop < t.find("etcdctl").unwrap());
        assert!(!t.contains("fill in"));
    }

    #[test]
    fn without_a_member_list_the_steps_have_placeholders() {
        let t = steps(None);
        assert_eq!(t.matches("etcdctl snapshot restore").count(), 1, "{t}");
        assert!(t.contains("fill in each member's name"), "{t}");
    }

    #[test]
    fn the_snapshot_goes_beside_the_bundle() {
        assert_eq!(
            snapshot_path(Path::new("/d/c-1-r5.kiln-bundle.tar")),
            PathBuf::from("/d/c-1-r5.kiln-bundle.tar.snapshot.db")
        );
    }
}
