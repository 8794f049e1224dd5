//! Starting and stopping a member: storage, Raft, background tasks and listeners.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt as _;
use tonic::transport::server::TcpIncoming;

use crate::api::grpc;
use crate::api::grpc::peer::PeerServer;
use crate::api::http;
use crate::command::KilnRaft;
use crate::compactor;
use crate::config::{ClusterState, Config, ConfigError, ListenUrl, Retention};
use crate::identity::{self, IdentityError};
use crate::join;
use crate::member::context::StoreContext;
use crate::member::leader;
use crate::member::lease::{self, Lessor};
use crate::member::proposer::Proposer;
use crate::member::raft::thread::RaftThread;
use crate::member::raft::{self, RaftSetupError, RaftTiming};
use crate::member::waiters::Waiters;
use crate::peer::client::PeerClients;
use crate::storage::mvcc::{Mvcc, MvccError};
use crate::storage::{close, db};
use crate::tls::{self, TlsError};

/// How long shutdown waits for connections and tasks before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Streams a client connection may reset before h2 closes it (h2's default is 20; see the client server).
const CLIENT_RESET_STREAMS_LIMIT: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("opening the key-value store: {0}")]
    Mvcc(#[from] MvccError),
    #[error(transparent)]
    Raft(#[from] RaftSetupError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("TLS setup for {url}: {source}")]
    TlsSetup {
        url: String,
        source: tonic::transport::Error,
    },
    #[error("binding {url}: {source}")]
    Bind { url: String, source: std::io::Error },
    #[error(transparent)]
    Peer(#[from] crate::peer::PeerError),
    #[error("joining the existing cluster: {0}")]
    Join(#[from] crate::join::JoinError),
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthStoreError),
    #[error("waiting for a shutdown signal: {0}")]
    Signal(std::io::Error),
}

/// A running member. Drop without `shutdown` stops Raft but leaves the client-side tasks
/// running until the runtime ends.
pub struct StoreHandle {
    client_addrs: Vec<SocketAddr>,
    peer_addrs: Vec<SocketAddr>,
    metrics_addrs: Vec<SocketAddr>,
    member_id: u64,
    cluster_id: u64,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    raft: KilnRaft,
    /// Where Raft runs; dropping it stops Raft (`shutdown` also waits for it to end).
    raft_thread: RaftThread,
    ctx: Arc<StoreContext>,
}

impl StoreHandle {
    /// The first bound client address (tests bind 127.0.0.1:0).
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addrs[0]
    }

    pub fn client_addrs(&self) -> &[SocketAddr] {
        &self.client_addrs
    }

    pub fn peer_addrs(&self) -> &[SocketAddr] {
        &self.peer_addrs
    }

    /// The Raft handle (tests read leadership and membership from its metrics).
    pub fn raft(&self) -> &KilnRaft {
        &self.raft
    }

    pub fn metrics_addrs(&self) -> &[SocketAddr] {
        &self.metrics_addrs
    }

    pub fn member_id(&self) -> u64 {
        self.member_id
    }

    pub fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    /// Current store revision.
    pub fn revision(&self) -> i64 {
        self.ctx.mvcc.revision()
    }

    /// Stops listeners and streams, then Raft, then closes the database (so the same data dir
    /// can be opened again, also in the same process).
    pub async fn shutdown(self) {
        let StoreHandle {
            shutdown_tx,
            tasks,
            raft,
            raft_thread,
            ctx,
            ..
        } = self;
        let _ = shutdown_tx.send(true);
        for mut task in tasks {
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
                .await
                .is_err()
            {
                tracing::warn!("a server task did not stop in time; aborting it");
                task.abort();
            }
        }
        if let Err(e) = raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        // Keep one strong handle and close the database here (`storage::close` says why).
        let db = ctx.mvcc.db().clone();
        drop(raft);
        drop(ctx);
        // The Raft thread owns openraft's core, state machine worker and log store (and their
        // snapshot builds); once it has ended none of them holds the database.
        if tokio::task::spawn_blocking(move || raft_thread.stop_and_join())
            .await
            .is_err()
        {
            tracing::warn!("joining the raft thread failed");
        }
        // Client-side stragglers (a watch stream's task, a proposer waiter) end soon after the
        // shutdown signal; they are waited for, bounded.
        let holders = close::close_last(db, SHUTDOWN_GRACE).await;
        if holders > 0 {
            tracing::warn!(holders, "database still referenced after shutdown");
        }
        tracing::info!("kiln-store stopped");
    }
}

/// Replaces a 0 port in advertised URLs by the port actually bound (tests bind port 0).
fn fix_advertised(urls: &[String], bound: &[SocketAddr]) -> Vec<String> {
    let port = bound.first().map(|a| a.port()).unwrap_or(0);
    urls.iter()
        .map(|u| {
            if u.ends_with(":0") {
                format!("{}{}", &u[..u.len() - 1], port)
            } else {
                u.clone()
            }
        })
        .collect()
}

/// The connections a listener accepts, with Nagle off. Without it a small gRPC write (a watch
/// event, a unary reply) that follows another unacknowledged one waits for the peer's delayed ACK
/// (~40 ms): two watch streams on one connection then see the same revision tens of ms apart,
/// which is enough for a controller whose trigger watch outruns its cache watch to act on a
/// stale cache. (`Server::tcp_nodelay` only applies when tonic binds the listener itself.)
fn accepted(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

async fn bind(url: &ListenUrl) -> Result<TcpListener, ServerError> {
    let addr = url.socket_addr().await?;
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            url: url.url.clone(),
            source,
        })
}

/// Starts a member and returns once it serves clients.
pub async fn start(config: Config) -> Result<StoreHandle, ServerError> {
    config.validate()?;
    let retention = Retention::parse(
        config.auto_compaction_mode,
        &config.auto_compaction_retention,
    )?;
    let client_urls = config.client_listen_urls()?;
    let metrics_urls = config.metrics_listen_urls()?;
    let tls_config = if client_urls.iter().any(|u| u.tls) {
        Some(tls::client_tls(&config)?)
    } else {
        None
    };

    // Bind first: a port clash fails fast, before any data is written.
    let mut client_listeners = Vec::new();
    for url in &client_urls {
        client_listeners.push((url.clone(), bind(url).await?));
    }
    let peer_urls = config.peer_listen_urls()?;
    let peer_tls = if peer_urls.iter().any(|u| u.tls) {
        Some(tls::peer_server_tls(&config)?)
    } else {
        None
    };
    let mut peer_listeners = Vec::new();
    for url in &peer_urls {
        peer_listeners.push((url.clone(), bind(url).await?));
    }
    let peer_addrs: Vec<SocketAddr> = peer_listeners
        .iter()
        .filter_map(|(_, l)| l.local_addr().ok())
        .collect();
    let mut metrics_listeners = Vec::new();
    for url in &metrics_urls {
        metrics_listeners.push(bind(url).await?);
    }
    let client_addrs: Vec<SocketAddr> = client_listeners
        .iter()
        .filter_map(|(_, l)| l.local_addr().ok())
        .collect();
    let metrics_addrs: Vec<SocketAddr> = metrics_listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();

    let database = db::open(&config.data_dir.join("member"))?;
    let peers = Arc::new(PeerClients::new(&config)?);
    let ident = match identity::load(&database, &config)? {
        Some(stored) => stored,
        None => {
            let fresh = match config.initial_cluster_state {
                ClusterState::New => identity::for_new_cluster(&config)?,
                ClusterState::Existing => join::discover(&config, &peers).await?,
            };
            identity::save(&database, &fresh)?;
            fresh
        }
    };
    let members = match config.initial_cluster_state {
        ClusterState::New => Some(identity::initial_members(&config)?),
        ClusterState::Existing => None,
    };
    let mvcc = Arc::new(Mvcc::open(database)?);
    let lessor = Arc::new(Lessor::new(&mvcc.leases()?));
    let timing = RaftTiming {
        heartbeat_ms: config.heartbeat_interval,
        election_ms: config.election_timeout,
        snapshot_count: config.snapshot_count,
    };
    let waiters = Arc::new(Waiters::new());
    let tokens = crate::auth::provider::TokenProvider::new(
        &config.token_opts()?,
        Duration::from_secs(config.auth_token_ttl),
    )
    .map_err(|e| ConfigError::AuthToken(config.auth_token.clone(), e))?;
    let auth = Arc::new(crate::auth::AuthStore::open_with(
        mvcc.db(),
        tokens,
        config.bcrypt_cost,
    )?);
    // Peers may call in as soon as Raft runs: serve the peer port first thing after.
    let (raft_handle, raft_thread) = raft::start(
        ident.member_id,
        timing,
        mvcc.clone(),
        lessor.clone(),
        &config.data_dir.join("member"),
        peers.clone(),
        waiters.clone(),
        auth.clone(),
    )
    .await?;
    raft::bootstrap(&raft_handle, ident.member_id, members).await?;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ctx = Arc::new(StoreContext {
        raft: raft_handle.clone(),
        mvcc: mvcc.clone(),
        lessor: lessor.clone(),
        auth,
        member_id: ident.member_id,
        cluster_id: ident.cluster_id,
        name: config.name.clone(),
        advertise_client_urls: fix_advertised(&config.advertise_client_urls, &client_addrs),
        data_dir: config.data_dir.clone(),
        quota_backend_bytes: config.quota_backend_bytes,
        max_request_bytes: config.max_request_bytes,
        peers,
        proposer: Proposer::start(
            raft_handle.clone(),
            waiters,
            shutdown_rx.clone(),
            raft_thread.handle(),
            config.keep_awake,
        ),
        shutdown: shutdown_rx.clone(),
    });

    let mut tasks = Vec::new();
    for (url, listener) in peer_listeners {
        let mut builder = tonic::transport::Server::builder();
        if url.tls {
            let tls = peer_tls.clone().ok_or(TlsError::MissingPeerCert)?;
            builder = builder
                .tls_config(tls)
                .map_err(|source| ServerError::TlsSetup {
                    url: url.url.clone(),
                    source,
                })?;
        }
        let router = builder.add_service(PeerServer::new(ctx.clone()));
        let mut stop = shutdown_rx.clone();
        tracing::info!(url = %url.url, addr = ?listener.local_addr().ok(), "serving peers");
        tasks.push(tokio::spawn(async move {
            let incoming = accepted(listener);
            let signal = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = router.serve_with_incoming_shutdown(incoming, signal).await {
                tracing::error!(error = %e, "peer server stopped");
            }
        }));
    }
    tasks.push(tokio::spawn(leader::publish_self(
        ctx.clone(),
        shutdown_rx.clone(),
    )));
    tasks.push(tokio::spawn(lease::run_expiry(
        lessor,
        raft_handle.clone(),
        shutdown_rx.clone(),
    )));
    tasks.push(tokio::spawn(compactor::run(
        retention,
        raft_handle.clone(),
        mvcc,
        shutdown_rx.clone(),
    )));
    for (url, listener) in client_listeners {
        // h2's rapid-reset guard closes the whole connection after 20 streams reset before they were
        // accepted; one kiln-apiserver multiplexes every watch and request over a single connection and
        // cancels many at once under load (client timeouts, watch restarts), which dropped all of them.
        // Go's etcd has no such per-connection cap; keep a guard, but one a busy apiserver never reaches.
        let mut builder = tonic::transport::Server::builder()
            .http2_max_pending_accept_reset_streams(Some(CLIENT_RESET_STREAMS_LIMIT))
            .http2_max_local_error_reset_streams(Some(CLIENT_RESET_STREAMS_LIMIT));
        if url.tls {
            let tls = tls_config.clone().ok_or(TlsError::MissingCert)?;
            builder = builder
                .tls_config(tls)
                .map_err(|source| ServerError::TlsSetup {
                    url: url.url.clone(),
                    source,
                })?;
        }
        let router = builder.add_routes(grpc::routes(ctx.clone()));
        let mut stop = shutdown_rx.clone();
        tracing::info!(url = %url.url, addr = ?listener.local_addr().ok(), "serving etcd v3 API");
        let tls = url.tls;
        tasks.push(tokio::spawn(async move {
            let incoming = accepted(listener);
            let signal = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let served = if tls {
                router.serve_with_incoming_shutdown(incoming, signal).await
            } else {
                // etcdctl's per-endpoint calls send a URL as :authority over plain HTTP.
                let incoming = incoming.map(|c| c.map(crate::authority::AuthorityFix::new));
                router.serve_with_incoming_shutdown(incoming, signal).await
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "client server stopped");
            }
        }));
    }
    for listener in metrics_listeners {
        let app = http::router(ctx.clone());
        let mut stop = shutdown_rx.clone();
        tracing::info!(addr = ?listener.local_addr().ok(), "serving /health and /metrics");
        tasks.push(tokio::spawn(async move {
            let signal = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .await
            {
                tracing::error!(error = %e, "metrics server stopped");
            }
        }));
    }
    tracing::info!(
        name = %config.name,
        member = %format!("{:x}", ident.member_id),
        cluster = %format!("{:x}", ident.cluster_id),
        "kiln-store started"
    );
    Ok(StoreHandle {
        client_addrs,
        peer_addrs,
        metrics_addrs,
        member_id: ident.member_id,
        cluster_id: ident.cluster_id,
        shutdown_tx,
        tasks,
        raft: raft_handle,
        raft_thread,
        ctx,
    })
}

/// Runs a member until SIGINT or SIGTERM, then shuts it down cleanly.
pub async fn run(config: Config) -> Result<(), ServerError> {
    let handle = start(config).await?;
    wait_for_signal().await?;
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> Result<(), ServerError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(ServerError::Signal)?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.map_err(ServerError::Signal),
        _ = term.recv() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = accepted(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let server_side = incoming.next().await.unwrap().unwrap();
        assert!(server_side.nodelay().unwrap());
    }
}
