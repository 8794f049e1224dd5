use std::sync::mpsc;

use super::*;
use crate::runtime::cri::api::Sandbox;
use crate::runtime::cri::fake::FakeCri;

const OLD: Duration = Duration::from_secs(3600);
const GRACE: Duration = Duration::from_secs(120);

fn id(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

/// Writes a reservation (or any file) `age` old.
fn plant(dir: &Path, name: &str, content: &str, age: Duration) {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    let f = File::options().write(true).open(&path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    n.sort();
    n
}

fn settings(dir: &Path) -> GcSettings {
    GcSettings {
        interval: Duration::from_secs(60),
        grace: GRACE,
        dir: dir.to_path_buf(),
    }
}

fn sandbox(id: &str, ready: bool) -> Sandbox {
    Sandbox {
        id: id.into(),
        ready,
        ip: None,
        labels: Default::default(),
    }
}

#[test]
fn owner_is_the_first_line_in_both_formats() {
    let a = id('a');
    for content in [
        a.clone(),
        format!("{a}\r\neth0"),
        format!("{a}\neth0"),
        format!("  {a}\n"),
    ] {
        assert_eq!(owner_of(&content), a, "{content:?}");
    }
    assert_eq!(owner_of(""), "");
}

#[test]
fn reads_only_ip_named_files() {
    let d = tempfile::tempdir().unwrap();
    plant(d.path(), "10.244.1.5", &format!("{}\r\neth0", id('a')), OLD);
    plant(d.path(), "10.244.1.6", &id('b'), OLD);
    plant(d.path(), "last_reserved_ip.0", "10.244.1.6", OLD);
    plant(d.path(), "lock", "", OLD);
    std::fs::create_dir(d.path().join("10.244.1.7")).unwrap();
    let r = read_reservations(d.path()).unwrap();
    let got: Vec<(String, String)> = r
        .iter()
        .map(|r| (r.ip.to_string(), r.owner.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("10.244.1.5".to_string(), id('a')),
            ("10.244.1.6".to_string(), id('b'))
        ]
    );
    assert!(read_reservations(&d.path().join("missing"))
        .unwrap()
        .is_empty());
}

#[test]
fn leaked_means_unknown_owner_and_older_than_the_grace() {
    let listed_at = SystemTime::now();
    let known: HashSet<String> = [id('a')].into();
    let r = |owner: String, age: Duration| Reservation {
        ip: "10.244.1.9".parse().unwrap(),
        owner,
        modified: listed_at - age,
    };
    assert!(is_leaked(&r(id('b'), OLD), &known, listed_at, GRACE));
    assert!(is_leaked(&r(String::new(), OLD), &known, listed_at, GRACE));
    assert!(!is_leaked(&r(id('a'), OLD), &known, listed_at, GRACE));
    assert!(!is_leaked(
        &r(id('b'), Duration::from_secs(5)),
        &known,
        listed_at,
        GRACE
    ));
    // Reserved after the listing (or the clock went back): kept.
    let later = Reservation {
        modified: listed_at + Duration::from_secs(30),
        ..r(id('b'), OLD)
    };
    assert!(!is_leaked(&later, &known, listed_at, GRACE));
}

#[test]
fn collect_removes_only_old_unowned_reservations() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    plant(dir, "10.244.1.2", &format!("{}\r\neth0", id('a')), OLD); // owned, new format
    plant(dir, "10.244.1.3", &id('b'), OLD); // owned, old format
    plant(dir, "10.244.1.4", &format!("{}\r\neth0", id('c')), OLD); // leaked, new format
    plant(dir, "10.244.1.5", &id('d'), OLD); // leaked, old format
    plant(dir, "10.244.1.6", &id('e'), Duration::from_secs(3)); // unowned but fresh
    plant(dir, "last_reserved_ip.0", "10.244.1.6", OLD);
    plant(dir, "lock", "", OLD);
    let known: HashSet<String> = [id('a'), id('b')].into();
    let released = collect(dir, &known, SystemTime::now(), GRACE).unwrap();
    let got: Vec<(String, String)> = released
        .iter()
        .map(|r| (r.ip.to_string(), r.owner.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("10.244.1.4".to_string(), id('c')),
            ("10.244.1.5".to_string(), id('d'))
        ]
    );
    assert_eq!(
        names(dir),
        [
            "10.244.1.2",
            "10.244.1.3",
            "10.244.1.6",
            "last_reserved_ip.0",
            "lock"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("last_reserved_ip.0")).unwrap(),
        "10.244.1.6"
    );
    // A second pass has nothing left to do.
    assert!(collect(dir, &known, SystemTime::now(), GRACE)
        .unwrap()
        .is_empty());
}

#[test]
fn collect_leaves_a_missing_directory_missing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kiln");
    assert!(collect(&dir, &HashSet::new(), SystemTime::now(), GRACE)
        .unwrap()
        .is_empty());
    assert!(!dir.exists());
}

#[test]
fn collect_waits_for_the_plugins_lock() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_path_buf();
    plant(&dir, "10.244.1.4", &id('c'), OLD);
    let held = lock(&dir).unwrap();
    let (tx, rx) = mpsc::channel();
    let worker = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            let r = collect(&dir, &HashSet::new(), SystemTime::now(), GRACE);
            tx.send(r.map(|r| r.len()).map_err(|e| e.to_string()))
                .unwrap();
        })
    };
    // While the plugin holds the lock nothing is removed (a GC that ignored the lock would be done).
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    assert!(dir.join("10.244.1.4").exists());
    drop(held);
    assert_eq!(rx.recv().unwrap(), Ok(1));
    worker.join().unwrap();
}

#[tokio::test]
async fn a_pass_keeps_every_listed_sandboxs_reservation() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let cri = FakeCri::default();
    // Any state, any labels: a not-ready sandbox still holds its IP until CNI DEL.
    cri.st().sandboxes.insert(id('a'), sandbox(&id('a'), true));
    cri.st().sandboxes.insert(id('b'), sandbox(&id('b'), false));
    plant(dir, "10.244.1.2", &format!("{}\r\neth0", id('a')), OLD);
    plant(dir, "10.244.1.3", &format!("{}\r\neth0", id('b')), OLD);
    plant(dir, "10.244.1.4", &format!("{}\r\neth0", id('c')), OLD);
    let released = pass(&cri, &settings(dir)).await.unwrap();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].owner, id('c'));
    assert_eq!(names(dir), ["10.244.1.2", "10.244.1.3", "lock"]);
}

#[tokio::test]
async fn a_failed_listing_releases_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let cri = FakeCri::default();
    cri.st().unavailable = true;
    plant(dir, "10.244.1.4", &id('c'), OLD);
    let err = pass(&cri, &settings(dir)).await.unwrap_err();
    assert!(matches!(err, GcError::Sandboxes(_)), "{err}");
    assert_eq!(names(dir), ["10.244.1.4"]);
}
