use std::path::PathBuf;

/// Everything that can go wrong with a lab, each naming the lab, host, file or command involved.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(
        "kiln lab needs root (it creates network namespaces, mounts and cgroups); run it with sudo"
    )]
    NotRoot,
    #[error("missing programs: {programs}; install them with: apt-get install -y {packages}")]
    MissingPrograms { programs: String, packages: String },
    #[error("lab name {name:?} is invalid: use 1-12 characters of a-z, 0-9 and '-', starting with a letter")]
    BadName { name: String },
    #[error("a lab needs between 1 and {max} hosts, not {count}")]
    BadHostCount { count: u32, max: u32 },
    #[error("lab {name:?} already exists and is running; use it, or `kiln lab down --name {name}` first")]
    NameInUse { name: String },
    #[error("no lab named {name:?}; create it with `kiln lab up --name {name}`")]
    NoSuchLab { name: String },
    #[error("lab {lab:?} has no host {host:?}")]
    NoSuchHost { lab: String, host: String },
    #[error(
        "host {host} of lab {lab:?} is stopped; start it with `kiln lab start {host} --name {lab}`"
    )]
    HostDown { lab: String, host: String },
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
    #[error("lab state {path} is corrupt: {reason}")]
    BadState { path: PathBuf, reason: String },
    #[error("building image {image}: {reason}")]
    Image { image: String, reason: String },
    #[error("a worker thread panicked")]
    Panicked,
    #[error(transparent)]
    Vm(#[from] super::vm::VmError),
}

impl LabError {
    pub(crate) fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| LabError::Io { what, path, source }
    }
}
