//! The kubelet's API client across client-certificate rotations. A `kube::Client` keeps the certificate
//! it was built with; after [`crate::tls_bootstrap`] swaps `kubelet.conf`, new connections made with it
//! fail once the old certificate expires. The node agent, which rotates, publishes each client it loads
//! here, and everything else (the workload pod loop, pod objects, events) holds one [`ClientSwitch::client`]:
//! a `kube::Client` whose every request goes through the newest published client. Watches opened before
//! a rotation run on until they reconnect, then with the new certificate; no pod is restarted.

use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the kubelet has no API client yet")]
    NotYet,
}

/// Where the node agent publishes the client it loaded; see the module docs.
pub struct ClientSwitch {
    tx: watch::Sender<Option<Client>>,
}

impl Default for ClientSwitch {
    fn default() -> Self {
        ClientSwitch {
            tx: watch::Sender::new(None),
        }
    }
}

impl ClientSwitch {
    /// From the next request on, every [`ClientSwitch::client`] uses `client`.
    pub fn set(&self, client: Client) {
        self.tx.send_replace(Some(client));
    }

    /// True once a client was published.
    pub fn is_set(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// A client that follows the switch, once the first one was published.
    pub async fn client(&self) -> Client {
        let mut rx = self.tx.subscribe();
        let first = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|c| c.clone())
            .expect("the sender lives as long as self");
        Client::new(Latest(rx), first.default_namespace().to_string())
    }
}

/// The tower service behind [`ClientSwitch::client`]: each call goes to the newest client.
#[derive(Clone)]
struct Latest(watch::Receiver<Option<Client>>);

impl tower::Service<Request<Body>> for Latest {
    type Response = Response<Body>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = BoxFuture<'static, Result<Response<Body>, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let client = self.0.borrow().clone();
        Box::pin(async move {
            let client = client.ok_or(ClientError::NotYet)?;
            // kube::Error goes through boxed: the outer client unboxes it, so callers see the same
            // errors (API status codes included) as with the inner client.
            Ok(client.send(req).await?)
        })
    }
}
