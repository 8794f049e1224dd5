//! `grpc-health-checking`: a `grpc.health.v1.Health` server on `--port` (5000) that answers SERVING
//! for the service named by `--service` (the empty name by default) and NOT_FOUND for any other,
//! turning NOT_SERVING after `--delay-unhealthy-sec` (never when negative), plus an HTTP server on
//! `--http-port` (8080) whose `/make-not-serving` and `/make-serving` force the answer, as upstream's
//! subcommand does. The kubelet's gRPC liveness and readiness probes are tested against it. `Watch`
//! is unimplemented, as upstream's.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::routing::any;
use axum::Router;
use clap::Args;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::gofmt;
use crate::server::{self, ServeError};

#[derive(Debug, Args)]
pub struct GrpcHealthCheckingArgs {
    /// Port number.
    #[arg(long, default_value_t = 5000)]
    pub port: u16,
    /// Port number for the /make-serving and /make-not-serving.
    #[arg(long = "http-port", default_value_t = 8080)]
    pub http_port: u16,
    /// Number of seconds to delay before start reporting NOT_SERVING, negative value indicates
    /// never.
    #[arg(long = "delay-unhealthy-sec", default_value_t = -1, allow_negative_numbers = true)]
    pub delay_unhealthy_sec: i64,
    /// Service name to register the health check for.
    #[arg(long, default_value = "")]
    pub service: String,
}

#[derive(Debug, thiserror::Error)]
pub enum GrpcHealthError {
    #[error(transparent)]
    Listen(#[from] ServeError),
    #[error("Error while starting the gRPC server on the :{port} listen address {source}")]
    Serve {
        port: u16,
        source: tonic::transport::Error,
    },
}

/// What the server answers, shared by the gRPC service and the HTTP control endpoints.
#[derive(Debug)]
pub struct HealthState {
    started: Instant,
    service: String,
    delay_unhealthy_sec: i64,
    /// Set by `/make-serving` (false) or `/make-not-serving` (true); None until either is called.
    forced_unhealthy: Mutex<Option<bool>>,
}

impl HealthState {
    pub fn new(started: Instant, service: String, delay_unhealthy_sec: i64) -> Self {
        HealthState {
            started,
            service,
            delay_unhealthy_sec,
            forced_unhealthy: Mutex::new(None),
        }
    }

    /// The answer to a Check of `service`: NOT_FOUND for a name not configured; NOT_SERVING when
    /// forced or once the delay has passed (a forced "serving" does not undo the delay, as
    /// upstream ORs the two); SERVING otherwise.
    pub fn check(&self, service: &str) -> Result<ServingStatus, Status> {
        if service != self.service {
            return Err(Status::not_found("unknown service"));
        }
        let forced = *self.forced_unhealthy.lock().expect("health state");
        let delayed = self.delay_unhealthy_sec >= 0
            && self.started.elapsed().as_secs_f64() >= self.delay_unhealthy_sec as f64;
        Ok(if forced == Some(true) || delayed {
            ServingStatus::NotServing
        } else {
            ServingStatus::Serving
        })
    }

    fn force(&self, unhealthy: bool) -> String {
        *self.forced_unhealthy.lock().expect("health state") = Some(unhealthy);
        gofmt::duration(self.started.elapsed())
    }
}

/// The `grpc.health.v1.Health` service over [`HealthState`].
#[derive(Debug, Clone)]
pub struct HealthChecker(pub Arc<HealthState>);

#[tonic::async_trait]
impl Health for HealthChecker {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        tracing::info!(
            "Serving the Check request for health check, started {} ago",
            gofmt::duration(self.0.started.elapsed())
        );
        let status = self.0.check(&request.get_ref().service)?;
        Ok(Response::new(HealthCheckResponse {
            status: status as i32,
        }))
    }

    type WatchStream = futures::stream::Empty<Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("unimplemented"))
    }
}

/// The HTTP control server: any method on `/make-not-serving` or `/make-serving` forces the answer
/// and replies 200 with the time since start, as Go prints a duration.
pub fn router(state: Arc<HealthState>) -> Router {
    let not_serving = state.clone();
    Router::new()
        .route(
            "/make-not-serving",
            any(move || async move {
                tracing::info!("Mark as unhealthy");
                not_serving.force(true)
            }),
        )
        .route(
            "/make-serving",
            any(move || async move {
                tracing::info!("Mark as healthy");
                state.force(false)
            }),
        )
}

pub async fn run(args: GrpcHealthCheckingArgs) -> Result<i32, GrpcHealthError> {
    let state = Arc::new(HealthState::new(
        Instant::now(),
        args.service,
        args.delay_unhealthy_sec,
    ));
    let http = server::bind_tcp(args.http_port).await?;
    tracing::info!("Http server starting to listen on :{}", args.http_port);
    let app = router(state.clone());
    tokio::spawn(server::serve(http, None, app, std::future::pending()));

    let grpc = server::bind_tcp(args.port).await?;
    tracing::info!("gRPC server starting to listen on :{}", args.port);
    tonic::transport::Server::builder()
        .add_service(HealthServer::new(HealthChecker(state)))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc))
        .await
        .map_err(|source| GrpcHealthError::Serve {
            port: args.port,
            source,
        })?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic_health::pb::health_client::HealthClient;

    use super::*;
    use crate::testutil::{get, spawn_router};

    fn state(service: &str, delay: i64) -> Arc<HealthState> {
        Arc::new(HealthState::new(Instant::now(), service.into(), delay))
    }

    #[test]
    fn unknown_services_are_not_found() {
        let s = state("", -1);
        assert_eq!(s.check("").ok(), Some(ServingStatus::Serving));
        let err = s.check("other").unwrap_err();
        assert_eq!(
            (err.code(), err.message()),
            (tonic::Code::NotFound, "unknown service")
        );
    }

    #[test]
    fn the_delay_turns_it_not_serving_and_forcing_serving_does_not_undo_it() {
        let s = state("svc", 0);
        assert_eq!(s.check("svc").ok(), Some(ServingStatus::NotServing));
        s.force(false);
        assert_eq!(s.check("svc").ok(), Some(ServingStatus::NotServing));
        let s = HealthState::new(Instant::now(), "svc".into(), 3600);
        assert_eq!(s.check("svc").ok(), Some(ServingStatus::Serving));
    }

    #[tokio::test]
    async fn http_endpoints_force_the_grpc_answer() {
        let s = state("", -1);
        let http = spawn_router(router(s.clone())).await;

        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let grpc = l.local_addr().unwrap();
        let service = HealthServer::new(HealthChecker(s));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(l)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        let mut client = HealthClient::new(channel);
        let check = |service: &str| HealthCheckRequest {
            service: service.into(),
        };
        let status = |r: Response<HealthCheckResponse>| r.into_inner().status;

        let r = client.check(check("")).await.unwrap();
        assert_eq!(status(r), ServingStatus::Serving as i32);

        let (code, _, _) = get(http, "/make-not-serving").await;
        assert_eq!(code, 200);
        let r = client.check(check("")).await.unwrap();
        assert_eq!(status(r), ServingStatus::NotServing as i32);

        let (code, _, _) = get(http, "/make-serving").await;
        assert_eq!(code, 200);
        let r = client.check(check("")).await.unwrap();
        assert_eq!(status(r), ServingStatus::Serving as i32);

        let err = client.check(check("nope")).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
        let err = client.watch(check("")).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unimplemented);
    }
}
