//! TLS (rustls via tonic) on the client and peer ports: server certificate, and
//! client-certificate auth when --client-cert-auth / --peer-client-cert-auth is set.

use std::path::Path;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("https client URLs need --cert-file and --key-file")]
    MissingCert,
    #[error("--client-cert-auth needs --trusted-ca-file")]
    MissingCa,
    #[error("https peer URLs need --peer-cert-file and --peer-key-file")]
    MissingPeerCert,
    #[error("--peer-client-cert-auth needs --peer-trusted-ca-file")]
    MissingPeerCa,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The TLS configuration for https client listeners.
pub fn client_tls(config: &Config) -> Result<ServerTlsConfig, TlsError> {
    let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) else {
        return Err(TlsError::MissingCert);
    };
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
    if config.client_cert_auth {
        let ca = config.trusted_ca_file.as_ref().ok_or(TlsError::MissingCa)?;
        tls = tls
            .client_ca_root(Certificate::from_pem(read(ca)?))
            .client_auth_optional(false);
    }
    Ok(tls)
}

/// The TLS configuration for https peer listeners: our peer certificate, and (with
/// --peer-client-cert-auth) only peers whose client certificate the peer CA signed.
pub fn peer_server_tls(config: &Config) -> Result<ServerTlsConfig, TlsError> {
    let (Some(cert), Some(key)) = (&config.peer_cert_file, &config.peer_key_file) else {
        return Err(TlsError::MissingPeerCert);
    };
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
    if config.peer_client_cert_auth {
        let ca = config
            .peer_trusted_ca_file
            .as_ref()
            .ok_or(TlsError::MissingPeerCa)?;
        tls = tls
            .client_ca_root(Certificate::from_pem(read(ca)?))
            .client_auth_optional(false);
    }
    Ok(tls)
}
