//! The small JSON record of what a lab was asked to be, so `up` can repair and `status` can report.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::layout::{write_file, LabLayout};
use super::LabError;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    pub name: String,
    pub hosts: u32,
    pub registry: bool,
    /// False while `up` is still working: a lab left like that is half-made and `up` / `down` repair it.
    pub complete: bool,
    /// Labs made before hosts could boot systemd have no such field: they are plain.
    #[serde(default)]
    pub init: super::InitMode,
    /// The hosts are qemu VMs (`kiln lab up --vm`).
    #[serde(default)]
    pub vm: bool,
    /// A VM lab's accelerator, once chosen by booting the first VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accel: Option<super::vm::Accel>,
}

pub fn load(l: &LabLayout) -> Result<Option<LabState>, LabError> {
    let path = l.state_file();
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| LabError::BadState {
                path,
                reason: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LabError::io("reading lab state", path)(e)),
    }
}

pub fn save(l: &LabLayout, st: &LabState) -> Result<(), LabError> {
    std::fs::create_dir_all(&l.dir).map_err(LabError::io("creating lab directory", &l.dir))?;
    let data = serde_json::to_vec_pretty(st).expect("lab state serializes");
    write_file(&l.state_file(), &data, 0o600)
}

#[derive(Debug, Clone, Serialize)]
pub struct HostStatus {
    pub name: String,
    pub address: String,
    pub pid: Option<i32>,
    pub partitioned: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LabStatus {
    pub name: String,
    pub netns: String,
    pub complete: bool,
    pub registry: bool,
    pub cluster_yaml: PathBuf,
    pub hosts: Vec<HostStatus>,
    /// What runs as the hosts' PID 1.
    pub init: super::InitMode,
    /// The hosts are qemu VMs; `pid` is then each VM's qemu.
    pub vm: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accel: Option<super::vm::Accel>,
}
