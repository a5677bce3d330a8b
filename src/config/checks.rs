//! What every section's check shares: the error that names the key, and
//! the value checks (ranges, durations, names, addresses).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Deserialize;

/// Why a configuration was refused. The message always names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Syntax(String),
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
}

pub(super) fn invalid(key: impl Into<String>, problem: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        problem: problem.to_string(),
    }
}

/// A map each of whose keys may appear once. YAML reads a repeated key
/// into a map as the last one written, so an operator who edits the first
/// of two `soccer:` queues would change nothing, silently; struct keys get
/// the same refusal from serde already.
pub(super) fn unique_keys<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct Unique<V>(std::marker::PhantomData<V>);
    impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Unique<V> {
        type Value = BTreeMap<String, V>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of names")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if out.contains_key(&key) {
                    return Err(serde::de::Error::custom(format!("duplicate name `{key}`")));
                }
                let value = map.next_value()?;
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_map(Unique(std::marker::PhantomData))
}

/// A PEM reading error in words (the parser's own name the bytes of the
/// line it stopped at as numbers).
pub(super) fn pem_problem(e: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { .. } => "a PEM section with no END line".into(),
        Error::IllegalSectionStart { .. } => "a malformed PEM BEGIN line".into(),
        Error::Base64Decode(_) => "a PEM section that is not Base64".into(),
        Error::NoItemsFound => "no PEM private key in it".into(),
        other => other.to_string(),
    }
}

/// Two listeners that would take the same connections: one port, and the
/// same address or an unspecified one that covers the other's (`0.0.0.0`
/// every IPv4 address, `[::]` every address, as Linux binds it
/// dual-stack). Linux refuses the second bind of such a pair, so the check
/// must refuse it too, not say OK to a config that cannot start.
pub(super) fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    let covers = |wide: IpAddr, other: IpAddr| match wide {
        IpAddr::V4(v4) => v4.is_unspecified() && other.to_canonical().is_ipv4(),
        IpAddr::V6(v6) => v6.is_unspecified(),
    };
    a.port() == b.port()
        && (a.ip().to_canonical() == b.ip().to_canonical()
            || covers(a.ip(), b.ip())
            || covers(b.ip(), a.ip()))
}

/// `host:port` or `[v6]:port` → the host part, if the port is a valid one.
pub(super) fn split_host_port(address: &str) -> Option<&str> {
    let (host, port) = address.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    if port == 0 || host.is_empty() {
        return None;
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return None;
    }
    Some(host)
}

/// `10.0.0.0/8`, `2001:db8::/32`, or a single address (`10.0.0.1`).
pub(super) fn cidr_or_ip(key: &str, value: &str) -> Result<ipnet::IpNet, ConfigError> {
    let value = value.trim();
    value
        .parse::<ipnet::IpNet>()
        .or_else(|_| value.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map(|net| net.trunc())
        .map_err(|_| {
            invalid(
                key,
                format!("`{value}` is not an address or CIDR (10.0.0.0/8)"),
            )
        })
}

pub(super) fn socket_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .trim()
        .parse()
        .map_err(|_| invalid(key, format!("`{value}` is not an ip:port address")))
}

/// A value that must say something: not empty, not only white space.
pub(super) fn non_empty(key: &str, value: String) -> Result<String, ConfigError> {
    if value.trim().is_empty() {
        return Err(invalid(key, "must not be empty"));
    }
    Ok(value)
}

pub(super) fn ranged(key: &str, value: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
    if value < min || value > max {
        return Err(invalid(
            key,
            format!("must be between {min} and {max} (got {value})"),
        ));
    }
    Ok(value)
}

pub(super) fn millis(key: &str, value: u64) -> Result<Duration, ConfigError> {
    ranged(key, value, MIN_INTERVAL_MS, MAX_DURATION_MS).map(Duration::from_millis)
}

/// Queue and upstream names end up in Redis keys and metric labels: keep them
/// plain. Braces in particular would break the `{queue}` hash tag.
pub(super) fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("name must be 1..{MAX_NAME_BYTES} characters of A-Z a-z 0-9 _ -"),
        ))
    }
}

pub(super) const MAX_NAME_BYTES: usize = 64;

/// The shortest admission interval (ms): keeps the background loops from
/// spinning.
pub const MIN_INTERVAL_MS: u64 = 10;
/// The longest duration any key takes (ms): a week.
pub const MAX_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;
