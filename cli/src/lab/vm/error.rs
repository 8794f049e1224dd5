use std::path::PathBuf;

/// What goes wrong with lab VMs, naming the host, accelerator and what the VM printed.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("building the VM image failed at {step}: {reason}")]
    ImageBuild { step: &'static str, reason: String },
    #[error("qemu could not start {host} ({accel}): {stderr}")]
    QemuFailed {
        host: String,
        accel: &'static str,
        stderr: String,
    },
    #[error(
        "VM {host} ({accel}) never reached SSH: {why}; the last lines of its serial console ({}):\n{console}",
        console_file.display()
    )]
    NoSsh {
        host: String,
        accel: &'static str,
        why: String,
        console: String,
        console_file: PathBuf,
    },
}
