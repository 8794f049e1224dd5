//! `GET|POST /portForward/{namespace}/{pod}[?port=…]`: CRI `PortForward` on the pod's sandbox gives a
//! one-time URL on containerd's streaming server, and the request (SPDY `portforward.k8s.io`, or the
//! WebSocket channel protocol with its `port`s) is replayed there and spliced like exec
//! ([`super::exec::proxy_to_streaming_server`]). Which port each stream reaches, and the runtime's
//! error when nothing listens there, travel inside the stream protocol, which is containerd's.
//! (kubectl's SPDY-over-WebSocket tunnel ends at the API server, which speaks SPDY to this.)

use std::collections::HashMap;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use k8s_cri::v1 as cri;

use super::exec::{proxy_to_streaming_server, ExecError};
use super::pods::{self, PodRuntime, PodSource};
use super::query;
use super::Body;
use crate::runtime::cri::{spec, CriApi, GrpcCri};

/// The `port` values of the query (only the WebSocket protocol sends them; SPDY names each
/// stream's port in its headers).
pub fn ports(q: &[(String, String)]) -> Result<Vec<i32>, String> {
    q.iter()
        .filter(|(k, _)| k == "port")
        .map(|(_, v)| match v.parse::<u16>() {
            Ok(0) => Err(format!("port {v:?} must be > 0")),
            Ok(p) => Ok(i32::from(p)),
            Err(e) => Err(format!("unable to parse {v:?} as a port: {e}")),
        })
        .collect()
}

pub async fn serve(
    cri: Option<&Arc<GrpcCri>>,
    source: &dyn PodSource,
    req: Request<Incoming>,
    namespace: &str,
    pod: &str,
) -> Result<Response<Body>, ExecError> {
    let cri = cri.ok_or_else(|| {
        ExecError::BadRequest("this kubelet has no container runtime (CRI) configured".into())
    })?;
    let p = pods::find(source, namespace, pod)
        .ok_or_else(|| ExecError::NotFound("pod does not exist".into()))?;
    if p.runtime != PodRuntime::Cri {
        return Err(ExecError::BadRequest(format!(
            "pod {pod} runs on the kiln-host runtime (host processes): port forwarding is only supported for CRI pods"
        )));
    }
    let q = query::parse_query(req.uri().query().unwrap_or(""));
    let port = ports(&q).map_err(ExecError::BadRequest)?;
    let labels = HashMap::from([(spec::LABEL_POD_UID.to_string(), p.uid().to_string())]);
    let sandboxes = cri
        .list_pod_sandboxes(labels)
        .await
        .map_err(|e| ExecError::Runtime(e.to_string()))?;
    // The ready sandbox (a pod has one; a lost one may linger until the worker removes it).
    let sandbox = sandboxes
        .iter()
        .find(|s| s.ready)
        .or_else(|| sandboxes.first())
        .ok_or_else(|| {
            ExecError::Runtime(format!(
                "failed to find sandboxID for pod {pod}_{namespace}({})",
                p.uid()
            ))
        })?;
    let url = cri
        .port_forward_url(cri::PortForwardRequest {
            pod_sandbox_id: sandbox.id.clone(),
            port,
        })
        .await
        .map_err(|e| ExecError::Runtime(e.to_string()))?;
    proxy_to_streaming_server(req, &url, format!("{namespace}/{pod} port-forward")).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_ports_are_parsed_as_upstream() {
        let q = query::parse_query("port=8080&port=80");
        assert_eq!(ports(&q).unwrap(), [8080, 80]);
        assert!(ports(&query::parse_query("")).unwrap().is_empty());
        assert_eq!(
            ports(&query::parse_query("port=0")).unwrap_err(),
            "port \"0\" must be > 0"
        );
        assert!(ports(&query::parse_query("port=x"))
            .unwrap_err()
            .starts_with("unable to parse \"x\" as a port"));
        assert!(ports(&query::parse_query("port=70000")).is_err());
    }
}
