//! The pod worker's side of termination messages ([`crate::termination_message`]): each run gets its
//! termination-log mount when it is created, and the message of an exited run is read once, when the
//! worker first sees the exit. A child of [`super`] to use the worker's private state.

use std::path::Path;

use super::super::api::CriContainer;
use super::*;
use crate::termination_message::{self as tm, Exit, NodeFiles};

impl PodWorker {
    /// Container `i`'s termination-log mount for run `attempt`, made empty now. A file that cannot be
    /// made is logged and the container runs without it, as upstream's.
    pub(super) fn termination_mount(&self, i: usize, attempt: u32) -> Option<cri::Mount> {
        let c = &self.ctrs[i].spec;
        tm::prepare(&self.cfg.pods_root, &self.uid, c, attempt).unwrap_or_else(|e| {
            tracing::warn!(pod = %self.key, container = %c.name, error = %e, "termination message file");
            None
        })
    }

    /// The terminated message of container `i`'s run `st` (exited): the runtime's, then the
    /// container's file or log tail per its policy, within the container's share of the pod's limit.
    pub(super) fn exit_message(&self, i: usize, st: &CriContainer) -> Option<String> {
        let c = &self.ctrs[i].spec;
        let file = tm::host_file(&self.cfg.pods_root, &self.uid, &c.name, st.attempt);
        let log = Path::new(&self.sandbox_config.log_directory)
            .join(spec::container_log_path(&c.name, st.attempt));
        let exit = Exit {
            exit_code: st.exit_code,
            reason: &st.reason,
            runtime_message: &st.message,
        };
        let message = tm::message(c, exit, &file, &log, &NodeFiles)?;
        Some(tm::truncate(
            message,
            tm::per_container_limit(self.ctrs.len()),
        ))
    }
}
