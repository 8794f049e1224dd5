//! How a pod's containers find names: before each RunPodSandbox the sandbox config gets the pod's host
//! name ([`crate::pod_hostname`]) and resolver config ([`crate::dns_config`], from the host's
//! resolv.conf read then, as upstream's); containerd writes them as the sandbox's /etc/hostname and
//! /etc/resolv.conf and mounts both into every container. Before each container is created the kubelet
//! rewrites the pod's hosts file ([`crate::etc_hosts`]) and mounts it at /etc/hosts — which also stops
//! containerd from mounting its copy of the node's — and reads the Services for the container's Service
//! variables ([`crate::service_env`]). A child of [`super`] to use the worker's private state.

use std::net::IpAddr;

use super::*;
use crate::dns_config;
use crate::etc_hosts;
use crate::pod_hostname;
use crate::service_env;

impl PodWorker {
    /// Puts the host name and DNS config into the sandbox config; an error is the sandbox's failure
    /// message (upstream's FailedCreatePodSandBox for an FQDN too long or an unreadable resolv.conf).
    pub(super) fn prepare_sandbox(&mut self) -> Result<(), String> {
        // The sandbox's seccomp profile and privilege (security_context.rs); upstream fails the sandbox.
        let seccomp = super::super::security_context::Seccomp::node(&self.cfg.pods_root);
        super::super::security_context::complete_sandbox_config(
            &self.pod,
            &seccomp,
            &mut self.sandbox_config,
        )
        .map_err(|e| e.to_string())?;
        let dns = &self.cfg.dns;
        self.sandbox_config.hostname =
            pod_hostname::sandbox_hostname(&self.pod, &dns.cluster_domain)
                .map_err(|e| e.to_string())?;
        let host = dns_config::read_host_resolv_conf(dns.resolv_conf.as_deref())
            .map_err(|e| e.to_string())?;
        let node_ips: Vec<IpAddr> = self.cfg.node_ip.parse().into_iter().collect();
        let formed = dns_config::pod_dns(&self.pod, dns, host.as_ref(), &node_ips);
        if formed.notices != self.dns_reported {
            for n in &formed.notices {
                self.event(
                    None,
                    EventType::Warning,
                    n.reason(),
                    n.message().to_string(),
                );
            }
            self.dns_reported = formed.notices;
        }
        let c = formed.config;
        self.sandbox_config.dns_config = Some(cri::DnsConfig {
            servers: c.servers,
            searches: c.searches,
            options: c.options,
        });
        Ok(())
    }

    /// Container `c`'s /etc/hosts mount, after (re)writing the pod's file with the current pod IP; None
    /// when upstream would not mount it (the container mounts /etc/hosts itself, or no IP yet).
    pub(super) fn hosts_mount(&self, c: &Container) -> Result<Option<cri::Mount>, String> {
        let ips: Vec<String> = self.pod_ip.iter().cloned().collect();
        if !etc_hosts::should_mount(c, &ips, self.host_network) {
            return Ok(None);
        }
        let spec = self.pod.spec.as_ref();
        let aliases = spec
            .and_then(|s| s.host_aliases.as_deref())
            .unwrap_or_default();
        let contents = if self.host_network {
            let node = std::fs::read(&self.cfg.node_hosts_file)
                .map_err(|e| format!("{}: {e}", self.cfg.node_hosts_file.display()))?;
            etc_hosts::host_network_contents(&node, aliases)
        } else {
            let names = pod_hostname::pod_names(&self.pod, &self.cfg.dns.cluster_domain)
                .map_err(|e| e.to_string())?;
            etc_hosts::managed_contents(&ips, &names.hostname, names.domain.as_deref(), aliases)
                .into_bytes()
        };
        let file = etc_hosts::path(&self.cfg.pods_root, &self.uid);
        etc_hosts::write(&file, &contents).map_err(|e| e.to_string())?;
        Ok(Some(etc_hosts::mount(&file)))
    }

    /// The Service variables of the pod's containers, from the Services known now.
    pub(super) fn service_env(&self) -> Result<Vec<(String, String)>, String> {
        let mut all = Vec::new();
        let listed = crate::services::listed(self.services.as_deref(), &mut all);
        service_env::for_pod(&self.pod, listed).map_err(|e| e.to_string())
    }
}
