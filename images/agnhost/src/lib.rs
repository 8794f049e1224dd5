//! kiln's agnhost: the subcommands of the Kubernetes e2e test image (`registry.k8s.io/e2e-test-images/
//! agnhost`) that conformance tests run, with upstream's flags, endpoints, output lines and exit codes,
//! so the tests' expectations hold against pods running this binary.

pub mod client;
pub mod connect;
pub mod crd_conversion_webhook;
pub mod dns;
pub mod entrypoint_tester;
pub mod gofmt;
pub mod grpc_health_checking;
pub mod guestbook;
pub mod kube_json;
pub mod liveness;
pub mod logs_generator;
pub mod mounttest;
pub mod netexec;
pub mod openidmetadata;
pub mod pause;
pub mod porter;
pub mod sample_apiserver;
pub mod serve_hostname;
pub mod server;
pub mod test_webserver;
pub mod webhook;

#[cfg(test)]
mod testutil;
