//! A non-root SSH user whose sudo asks for a password (real sudo on a lab host): kiln asks once per user
//! (here from KILN_SUDO_PASSWORD_FILE, as CI and cron would), checks it on the host and runs every
//! command through it; a wrong password and a missing terminal are the documented errors, never a hang.

use std::process::Stdio;

use kiln_tests::{bin, run, TestLab};

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn a_sudo_password_is_asked_once_checked_and_used() {
    let lab = TestLab::up("t-sudo", 1, false);
    // alice: home under /var (private to the lab host), sudo with a password, the lab's SSH key.
    lab.ssh_ok(
        "host1",
        "useradd -d /var/lib/alice -m -s /bin/sh alice && echo 'alice:pw-123' | chpasswd && \
         echo 'alice ALL=(ALL:ALL) ALL' > /etc/sudoers.d/alice && chmod 440 /etc/sudoers.d/alice && \
         mkdir -p /var/lib/alice/.ssh && cp /root/.ssh/authorized_keys /var/lib/alice/.ssh/ && \
         chown -R alice /var/lib/alice",
    );
    let yaml = std::fs::read_to_string(lab.dir.join("cluster.yaml")).unwrap();
    let file = lab.dir.join("alice.yaml");
    std::fs::write(&file, yaml.replace("user: root", "user: alice")).unwrap();
    let good = lab.dir.join("good-password");
    let bad = lab.dir.join("bad-password");
    std::fs::write(&good, "pw-123\n").unwrap();
    std::fs::write(&bad, "nope\n").unwrap();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let file = file.to_string_lossy();
    // No controlling terminal (setsid), like cron: kiln must not wait for a prompt nobody answers.
    let preflight = |password: Option<&std::path::Path>| {
        let mut c = lab.in_lab(&["setsid", "-w", &kiln, "preflight", "-f", &file]);
        c.stdin(Stdio::null());
        match password {
            Some(p) => c.env("KILN_SUDO_PASSWORD_FILE", p),
            None => c.env_remove("KILN_SUDO_PASSWORD_FILE"),
        };
        let o = run(&mut c);
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };

    let (ok, out) = preflight(Some(&good));
    assert!(ok, "{out}");
    // IsPrivilegedUser passed: the checks ran as root through sudo.
    assert!(!out.contains("IsPrivilegedUser"), "{out}");

    let (ok, out) = preflight(Some(&bad));
    assert!(!ok);
    assert!(
        out.contains("alice@host1") && out.contains("sudo refused user alice"),
        "{out}"
    );
    assert!(!out.contains("nope"), "the password leaked: {out}");

    let (ok, out) = preflight(None);
    assert!(!ok);
    assert!(
        out.contains("no terminal to ask for the sudo password"),
        "{out}"
    );
}
