//! `upstreams` and `routes`: where protected requests go.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::checks::*;
use super::defaults;

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// `host:port` each, as written in the file (`address` is one of them).
    pub addresses: Vec<String>,
    /// How often names are resolved again.
    pub resolve_interval: Duration,
    pub load_balancing: LoadBalancing,
    /// Active health checks; without them every address is used.
    pub health_check: Option<HealthCheckConfig>,
    pub tls: bool,
    /// Server name for TLS; defaults to the host part of the first address.
    pub sni: String,
    /// A private CA that signs the upstream's certificate (PEM); without it,
    /// the public web roots. The certificate is always verified.
    pub ca_file: Option<PathBuf>,
    /// Past this, connecting gives the client a 504.
    pub connect_timeout: Duration,
    /// Past this without a byte of the response, the client gets a 504.
    pub read_timeout: Duration,
}

/// How a request picks one of an upstream's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadBalancing {
    RoundRobin,
    LeastConnections,
}

/// An active health check: `GET path` on each address every `interval`;
/// no 200 within `timeout` marks the address down until one does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub prefix: String,
    pub upstream: String,
    pub queue: String,
    /// Requests with `Upgrade` (WebSocket) are forwarded and the upstream's
    /// `101` relayed; without it they are refused with 400.
    pub websocket: bool,
    /// Browsers without a valid token are sent to the queue's waiting-room
    /// page instead of getting the JSON 401.
    pub waiting_room: bool,
}

// ---------------------------------------------------------------------------
// The file as written. Every struct rejects unknown keys so that a typo is an
// error at start, not a silently ignored setting.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawUpstream {
    #[serde(default)]
    pub(super) address: Option<String>,
    #[serde(default)]
    pub(super) addresses: Option<Vec<String>>,
    #[serde(default = "defaults::resolve_interval_s")]
    pub(super) resolve_interval_s: u64,
    #[serde(default = "defaults::load_balancing")]
    pub(super) load_balancing: String,
    #[serde(default)]
    pub(super) health_check: Option<RawHealthCheck>,
    #[serde(default)]
    pub(super) tls: RawTls,
    #[serde(default)]
    pub(super) sni: Option<String>,
    #[serde(default = "defaults::connect_timeout_ms")]
    pub(super) connect_timeout_ms: u64,
    #[serde(default = "defaults::read_timeout_ms")]
    pub(super) read_timeout_ms: u64,
}

/// `tls: true|false`, or `tls: {sni, ca-file}` (which turns TLS on).
#[derive(Default)]
pub(super) struct RawTls {
    pub(super) on: bool,
    pub(super) sni: Option<String>,
    pub(super) ca_file: Option<PathBuf>,
}

section! {
    RawTlsMap {
        sni: Option<String> = None,
        ca_file: Option<PathBuf> = None,
    }
}

impl<'de> Deserialize<'de> for RawTls {
    /// A bool or a map, each with its own errors: an unknown key in the map
    /// is named, as everywhere else in the file.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawTls;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false, or a map with sni and ca-file")
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<RawTls, E> {
                Ok(RawTls {
                    on,
                    ..RawTls::default()
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawTls, A::Error> {
                let map =
                    RawTlsMap::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawTls {
                    on: true,
                    sni: map.sni,
                    ca_file: map.ca_file,
                })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

section! {
    RawHealthCheck {
        path: String = "/".into(),
        interval_ms: u64 = 1_000,
        timeout_ms: u64 = 500,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRoute {
    pub(super) prefix: String,
    pub(super) upstream: String,
    pub(super) queue: String,
    #[serde(default)]
    pub(super) websocket: bool,
    #[serde(default)]
    pub(super) waiting_room: bool,
}

impl RawUpstream {
    pub(super) fn validate(self, key: &str) -> Result<UpstreamConfig, ConfigError> {
        let (list_key, addresses) = match (self.address, self.addresses) {
            (Some(address), None) => (format!("{key}.address"), vec![address]),
            (None, Some(addresses)) => (format!("{key}.addresses"), addresses),
            (Some(_), Some(_)) => {
                return Err(invalid(
                    key.to_string(),
                    "give address or addresses, not both",
                ))
            }
            (None, None) => {
                return Err(invalid(
                    format!("{key}.addresses"),
                    "an upstream needs address (host:port) or addresses (a list)",
                ))
            }
        };
        if addresses.is_empty() {
            return Err(invalid(list_key, "must list at least one host:port"));
        }
        let addresses: Vec<String> = addresses.iter().map(|a| a.trim().to_string()).collect();
        for (i, address) in addresses.iter().enumerate() {
            if split_host_port(address).is_none() {
                return Err(invalid(
                    list_key.clone(),
                    format!("`{address}` must be host:port"),
                ));
            }
            // Listed twice, an address would take twice the traffic,
            // which nobody writes on purpose.
            if addresses[..i].contains(address) {
                return Err(invalid(
                    list_key.clone(),
                    format!("`{address}` is listed twice"),
                ));
            }
        }
        let host = split_host_port(&addresses[0]).unwrap_or_default();
        let load_balancing = match self.load_balancing.as_str() {
            "round-robin" => LoadBalancing::RoundRobin,
            "least-connections" => LoadBalancing::LeastConnections,
            other => {
                return Err(invalid(
                    format!("{key}.load-balancing"),
                    format!("must be round-robin or least-connections (got `{other}`)"),
                ))
            }
        };
        let health_check = match self.health_check {
            None => None,
            Some(check) => {
                if !check.path.starts_with('/')
                    || crate::path::classify(check.path.as_bytes()).is_err()
                {
                    return Err(invalid(
                        format!("{key}.health-check.path"),
                        "must be a plain path starting with /",
                    ));
                }
                Some(HealthCheckConfig {
                    path: check.path,
                    interval: Duration::from_millis(ranged(
                        &format!("{key}.health-check.interval-ms"),
                        check.interval_ms,
                        50,
                        3_600_000,
                    )?),
                    timeout: Duration::from_millis(ranged(
                        &format!("{key}.health-check.timeout-ms"),
                        check.timeout_ms,
                        10,
                        60_000,
                    )?),
                })
            }
        };
        let resolve_interval = Duration::from_secs(ranged(
            &format!("{key}.resolve-interval-s"),
            self.resolve_interval_s,
            1,
            86_400,
        )?);
        let sni = match self.tls.sni.clone().or(self.sni) {
            Some(sni) if sni.trim().is_empty() => {
                return Err(invalid(format!("{key}.sni"), "must not be empty"))
            }
            Some(sni) => sni,
            None => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        };
        Ok(UpstreamConfig {
            addresses,
            resolve_interval,
            load_balancing,
            health_check,
            tls: self.tls.on,
            ca_file: match self.tls.ca_file {
                None => None,
                Some(path) => {
                    let pem = std::fs::read(&path).map_err(|e| {
                        invalid(
                            format!("{key}.tls.ca-file"),
                            format!("{}: {e}", path.display()),
                        )
                    })?;
                    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                        return Err(invalid(
                            format!("{key}.tls.ca-file"),
                            format!("{}: no PEM certificate in it", path.display()),
                        ));
                    }
                    Some(path)
                }
            },
            sni,
            connect_timeout: Duration::from_millis(ranged(
                &format!("{key}.connect-timeout-ms"),
                self.connect_timeout_ms,
                1,
                600_000,
            )?),
            read_timeout: Duration::from_millis(ranged(
                &format!("{key}.read-timeout-ms"),
                self.read_timeout_ms,
                1,
                3_600_000,
            )?),
        })
    }
}

pub(super) fn check_route_prefix(key: &str, prefix: &str) -> Result<(), ConfigError> {
    if !prefix.starts_with('/') {
        return Err(invalid(key, "must start with /"));
    }
    if prefix.len() > 1 && prefix.ends_with('/') {
        return Err(invalid(
            key,
            "must not end with / (prefixes match at segment boundaries already)",
        ));
    }
    if crate::path::classify(prefix.as_bytes()).is_err() {
        return Err(invalid(
            key,
            "must be a plain path (no empty, . or .. segments, no %, ;, \\ or control bytes)",
        ));
    }
    if crate::path::is_queue_api_path(prefix) {
        return Err(invalid(
            key,
            "overlaps the queue API (/api/v1/queue), which waitgate answers itself",
        ));
    }
    if crate::path::under_prefix(crate::path::KEYS_PATH, prefix)
        && crate::path::under_prefix(prefix, "/.well-known/waitgate")
    {
        return Err(invalid(
            key,
            "overlaps /.well-known/waitgate/keys, which waitgate answers itself",
        ));
    }
    Ok(())
}
