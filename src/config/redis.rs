//! `redis`: one server, a Sentinel set or a Cluster, and TLS to it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::checks::*;

#[derive(Debug, Clone)]
pub struct RedisConfig {
    pub mode: RedisMode,
    /// Certificates for `rediss://` (and TLS Sentinels and Cluster nodes).
    pub tls: Option<RedisTls>,
    /// Upper bound on any one Redis call made for a client request; past it
    /// the client gets a 503 rather than waiting on a sick Redis.
    pub command_timeout: Duration,
    /// After each write, wait until this many replicas have it (0: don't).
    pub wait_replicas: u64,
    /// How long that wait may take before the write counts as failed.
    pub wait_timeout: Duration,
    /// Concurrent register, rank and token calls of one queue share one
    /// script call (`store::coalesce`); `false` makes one call each.
    pub coalesce: bool,
    /// While a queue's rank polls follow one another on an instance, its
    /// coalesced rank calls start at least this far apart, short of a full
    /// call (`store::coalesce`); zero: each as soon as the last returns.
    pub poll_pace: Duration,
}

/// Which Redis topology holds the queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisMode {
    Standalone {
        url: String,
    },
    /// The master that these Sentinels name `master_name`.
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
    /// A Redis Cluster, found from any of these seed nodes.
    Cluster {
        nodes: Vec<String>,
    },
}

/// Files for TLS to Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTls {
    /// A private CA to trust (PEM); without it, the public web roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and key (PEM), for servers that ask for one.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

section! {
    RawRedis {
        mode: String = "standalone".into(),
        url: Option<String> = None,
        sentinels: Vec<String> = Vec::new(),
        master_name: Option<String> = None,
        nodes: Vec<String> = Vec::new(),
        tls: Option<RawRedisTls> = None,
        command_timeout_ms: u64 = 500,
        wait_replicas: u64 = 0,
        wait_timeout_ms: u64 = 100,
        coalesce: bool = true,
        poll_pace_ms: u64 = 50,
    }
}

section! {
    RawRedisTls {
        ca_file: Option<PathBuf> = None,
        cert_file: Option<PathBuf> = None,
        key_file: Option<PathBuf> = None,
    }
}

impl RawRedis {
    pub(super) fn validate(self) -> Result<RedisConfig, ConfigError> {
        let only = |key: &str, given: bool, mode: &str| {
            if given {
                Err(invalid(
                    format!("redis.{key}"),
                    format!("does not apply to mode {mode}"),
                ))
            } else {
                Ok(())
            }
        };
        let mode = match self.mode.as_str() {
            "standalone" => {
                only("sentinels", !self.sentinels.is_empty(), "standalone")?;
                only("master-name", self.master_name.is_some(), "standalone")?;
                only("nodes", !self.nodes.is_empty(), "standalone")?;
                let url = self
                    .url
                    .ok_or_else(|| invalid("redis.url", "is required (mode standalone)"))?;
                RedisMode::Standalone {
                    url: redis_url("redis.url", &url)?,
                }
            }
            "sentinel" => {
                only("url", self.url.is_some(), "sentinel")?;
                only("nodes", !self.nodes.is_empty(), "sentinel")?;
                let sentinels = redis_urls("redis.sentinels", &self.sentinels, "Sentinel")?;
                let master_name = self
                    .master_name
                    .filter(|n| !n.trim().is_empty())
                    .ok_or_else(|| invalid("redis.master-name", "is required (mode sentinel)"))?;
                RedisMode::Sentinel {
                    sentinels,
                    master_name,
                }
            }
            "cluster" => {
                only("url", self.url.is_some(), "cluster")?;
                only("sentinels", !self.sentinels.is_empty(), "cluster")?;
                only("master-name", self.master_name.is_some(), "cluster")?;
                let nodes = redis_urls("redis.nodes", &self.nodes, "node")?;
                RedisMode::Cluster { nodes }
            }
            other => {
                return Err(invalid(
                    "redis.mode",
                    format!("must be standalone, sentinel or cluster (got `{other}`)"),
                ))
            }
        };
        let tls = match self.tls {
            None => None,
            Some(tls) => {
                for (key, path) in [
                    ("ca-file", &tls.ca_file),
                    ("cert-file", &tls.cert_file),
                    ("key-file", &tls.key_file),
                ] {
                    if let Some(path) = path {
                        if let Err(e) = std::fs::metadata(path) {
                            return Err(invalid(
                                format!("redis.tls.{key}"),
                                format!("{}: {e}", path.display()),
                            ));
                        }
                    }
                }
                if tls.cert_file.is_some() != tls.key_file.is_some() {
                    return Err(invalid("redis.tls", "cert-file and key-file go together"));
                }
                check_redis_tls(&tls)?;
                Some(RedisTls {
                    ca_file: tls.ca_file,
                    cert_file: tls.cert_file,
                    key_file: tls.key_file,
                })
            }
        };
        let ms = ranged(
            "redis.command-timeout-ms",
            self.command_timeout_ms,
            1,
            60_000,
        )?;
        let wait_replicas = ranged("redis.wait-replicas", self.wait_replicas, 0, 16)?;
        let wait_ms = ranged("redis.wait-timeout-ms", self.wait_timeout_ms, 1, 60_000)?;
        let pace_ms = ranged("redis.poll-pace-ms", self.poll_pace_ms, 0, 250)?;
        Ok(RedisConfig {
            mode,
            tls,
            command_timeout: Duration::from_millis(ms),
            wait_replicas,
            wait_timeout: Duration::from_millis(wait_ms),
            coalesce: self.coalesce,
            poll_pace: Duration::from_millis(pace_ms),
        })
    }
}

/// Reads `redis.tls`'s files as the Redis client will: it parses them only
/// when it connects, so a CA file with no certificate in it would
/// otherwise pass the check and fail every connection later, and a broken
/// one stop start-up with the PEM parser's words.
pub(super) fn check_redis_tls(tls: &RawRedisTls) -> Result<(), ConfigError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certificates = |key: &str, path: &Path| {
        let bad = |e: String| {
            invalid(
                format!("redis.tls.{key}"),
                format!("{}: {e}", path.display()),
            )
        };
        let found = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(pem_problem(&e)))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(pem_problem(&e)))?;
        if found.is_empty() {
            return Err(bad("no PEM certificate in it".into()));
        }
        Ok(())
    };
    if let Some(path) = &tls.ca_file {
        certificates("ca-file", path)?;
    }
    if let Some(path) = &tls.cert_file {
        certificates("cert-file", path)?;
    }
    if let Some(path) = &tls.key_file {
        PrivateKeyDer::from_pem_file(path).map_err(|e| {
            invalid(
                "redis.tls.key-file",
                format!("{}: {}", path.display(), pem_problem(&e)),
            )
        })?;
    }
    Ok(())
}

/// A Redis URL (`redis://` or `rediss://`) the redis crate accepts.
/// A list of Redis URLs that names at least one `what`.
fn redis_urls(key: &str, urls: &[String], what: &str) -> Result<Vec<String>, ConfigError> {
    if urls.is_empty() {
        return Err(invalid(key, format!("list at least one {what}")));
    }
    urls.iter().map(|u| redis_url(key, u)).collect()
}

pub(super) fn redis_url(key: &str, url: &str) -> Result<String, ConfigError> {
    let url = url.trim().to_string();
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(invalid(key, "must start with redis:// or rediss://"));
    }
    if let Err(e) = redis::Client::open(url.as_str()) {
        return Err(invalid(key, format!("not a valid Redis URL: {e}")));
    }
    Ok(url)
}
