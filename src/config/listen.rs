//! `listen-tls` and the client limits of the proxy listeners.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::checks::*;
use super::defaults;

/// The TLS listener: the same proxy, over TLS, HTTP/2 or HTTP/1.1 by ALPN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListener {
    pub address: SocketAddr,
    /// The certificate chain and its key (PEM).
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// The streams an HTTP/2 connection may have open at once.
    pub h2_max_streams: u32,
    /// HTTP/2 flow control: the request body bytes a connection, and each
    /// of its streams, may have sent ahead of what waitgate read; and the
    /// response bytes each stream buffers toward a slow reader.
    pub h2_window_bytes: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawTlsListener {
    pub(super) address: String,
    pub(super) cert_file: PathBuf,
    pub(super) key_file: PathBuf,
    #[serde(default = "defaults::h2_max_streams")]
    pub(super) h2_max_streams: u64,
    #[serde(default = "defaults::h2_window_bytes")]
    pub(super) h2_window_bytes: u64,
}

/// Loads the listener's certificate chain and key as Pingora will and
/// builds the TLS server config from them: Pingora does that only when the
/// listener starts, and panics in its thread on a file it cannot use,
/// leaving a process that serves nothing and answers its health checks.
pub(super) fn check_tls_pair(cert: &Path, key: &Path) -> Result<(), ConfigError> {
    use pingora::tls::{load_certs_and_key_files, version, ServerConfig};
    let loaded = load_certs_and_key_files(&cert.to_string_lossy(), &key.to_string_lossy());
    let Ok(Some((certs, private))) = loaded else {
        return Err(invalid(
            "listen-tls",
            format!(
                "no certificate in {} or no private key in {}",
                cert.display(),
                key.display()
            ),
        ));
    };
    pingora::tls::install_default_crypto_provider();
    ServerConfig::builder_with_protocol_versions(&[&version::TLS12, &version::TLS13])
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map(|_| ())
        .map_err(|e| {
            invalid(
                "listen-tls.key-file",
                format!("{} with {}: {e}", key.display(), cert.display()),
            )
        })
}

/// What a client may take of the proxy listener.
#[derive(Debug, Clone, Copy)]
pub struct ClientLimits {
    /// Open connections at most; past it new ones get a 503.
    pub max_connections: usize,
    /// A whole request header must arrive within this, counted from accept
    /// or from the end of the previous reply (so it also bounds idle
    /// keep-alive connections).
    pub header_timeout: Duration,
    /// A queue API body must arrive whole within this; a proxied body may
    /// pause this long between reads.
    pub body_timeout: Duration,
}
