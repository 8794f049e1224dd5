//! The atomic writer on a temp dir (no root needed).

use super::*;

fn files(v: &[(&str, &str, u32)]) -> Files {
    v.iter()
        .map(|(p, d, m)| {
            (
                p.to_string(),
                FileSpec {
                    data: d.as_bytes().to_vec(),
                    mode: *m,
                },
            )
        })
        .collect()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn layout_is_timestamped_dir_data_link_and_per_key_links() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("vol");
    let changed = write(
        &dir,
        &files(&[("color", "blue", 0o644), ("conf/app.ini", "x=1", 0o400)]),
    )
    .unwrap();
    assert!(changed);
    let data = std::fs::read_link(dir.join("..data")).unwrap();
    let data = data.to_str().unwrap();
    assert!(data.starts_with("..20"), "{data}");
    assert!(dir.join(data).is_dir());
    assert_eq!(
        std::fs::read_link(dir.join("color")).unwrap(),
        Path::new("..data/color")
    );
    assert_eq!(
        std::fs::read_link(dir.join("conf")).unwrap(),
        Path::new("..data/conf")
    );
    assert_eq!(std::fs::read_to_string(dir.join("color")).unwrap(), "blue");
    assert_eq!(
        std::fs::read_to_string(dir.join("conf/app.ini")).unwrap(),
        "x=1"
    );
    assert_eq!(mode(&dir.join("conf/app.ini")), 0o400);
    assert_eq!(mode(&dir.join("color")), 0o644);
}

#[test]
fn unchanged_payload_is_a_no_op_and_a_change_swaps_and_cleans_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("vol");
    let one = files(&[("a", "1", 0o644), ("b", "2", 0o644)]);
    write(&dir, &one).unwrap();
    let first = std::fs::read_link(dir.join("..data")).unwrap();
    assert!(!write(&dir, &one).unwrap(), "same payload: nothing to do");
    assert_eq!(std::fs::read_link(dir.join("..data")).unwrap(), first);

    // A mode change alone is a change.
    assert!(write(&dir, &files(&[("a", "1", 0o600), ("b", "2", 0o644)])).unwrap());

    let two = files(&[("a", "one", 0o644), ("c", "3", 0o644)]);
    assert!(write(&dir, &two).unwrap());
    let second = std::fs::read_link(dir.join("..data")).unwrap();
    assert_ne!(second, first);
    assert!(!dir.join(&first).exists(), "the old payload dir is removed");
    assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "one");
    assert_eq!(std::fs::read_to_string(dir.join("c")).unwrap(), "3");
    assert!(
        std::fs::symlink_metadata(dir.join("b")).is_err(),
        "a key that went away loses its link"
    );
    let mut entries: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        vec![
            second.to_string_lossy().into_owned(),
            "..data".into(),
            "a".into(),
            "c".into()
        ]
    );
}

#[test]
fn an_empty_payload_is_an_empty_volume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("vol");
    write(&dir, &files(&[("a", "1", 0o644)])).unwrap();
    assert!(write(&dir, &Files::new()).unwrap());
    assert!(std::fs::symlink_metadata(dir.join("a")).is_err());
    assert!(dir.join("..data").is_dir());
}

#[test]
fn hostile_paths_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for bad in ["../escape", "/abs", "..data", "a/../../b", ""] {
        let err = write(tmp.path(), &files(&[(bad, "x", 0o644)])).unwrap_err();
        assert!(
            matches!(err, WriterError::InvalidPath { .. }),
            "{bad}: {err}"
        );
    }
    let err = write(
        tmp.path(),
        &files(&[("a", "x", 0o644), ("a/b", "y", 0o644)]),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("both a file and a directory"),
        "{err}"
    );
}

#[test]
fn volume_ownership_regroups_everything_and_leaves_symlink_targets_modes_alone() {
    use std::os::unix::fs::MetadataExt;
    let group = if nix::unistd::geteuid().is_root() {
        4321
    } else {
        nix::unistd::getegid().as_raw()
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("vol");
    write_owned(
        &dir,
        &files(&[("a", "1", 0o400), ("sub/b", "2", 0o600)]),
        Some(group),
    )
    .unwrap();
    assert_eq!(mode(&dir.join("a")), 0o440);
    assert_eq!(mode(&dir.join("sub/b")), 0o640);
    assert_eq!(mode(&dir.join("sub")), 0o2755);
    assert_eq!(std::fs::metadata(dir.join("sub/b")).unwrap().gid(), group);
    let link = std::fs::symlink_metadata(dir.join("..data")).unwrap();
    assert!(link.file_type().is_symlink());
    assert_eq!(link.gid(), group, "links are regrouped too");

    // A writable volume (emptyDir): group read/write, and setgid on directories.
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(scratch.join("f"), "x").unwrap();
    std::fs::set_permissions(scratch.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("f", scratch.join("l")).unwrap();
    set_volume_ownership(&scratch, group, false).unwrap();
    assert_eq!(mode(&scratch), 0o2777);
    assert_eq!(mode(&scratch.join("f")), 0o660);
    assert_eq!(std::fs::metadata(scratch.join("f")).unwrap().gid(), group);
}
