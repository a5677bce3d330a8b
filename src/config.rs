//! The YAML configuration, parsed into one validated [`Config`].
//!
//! Parsing happens in two steps, as `waitgate -t` and start-up both need:
//! serde reads the file into plain structs that reject unknown keys, then
//! [`Config::from_yaml`] checks every value once and names the offending key
//! in its error. Nothing after this module needs to re-check a value.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
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

fn invalid(key: impl Into<String>, problem: impl fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        problem: problem.to_string(),
    }
}

/// The whole, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the proxy (queue API and protected routes) listens.
    pub listen: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` listen: kept apart from
    /// `listen` so that the public listener never exposes them.
    pub admin_listen: SocketAddr,
    /// A second proxy listener, with TLS, speaking HTTP/2 and HTTP/1.1.
    pub listen_tls: Option<TlsListener>,
    /// Worker threads of the proxy service.
    pub threads: usize,
    /// SIGTERM: stop accepting, drain in-flight requests, exit within this.
    pub grace_period: Duration,
    pub clients: ClientLimits,
    /// Serve plain GET/HEAD requests with a valid token, and rank polls,
    /// through waitgate's own HTTP/1.1 relay instead of Pingora's proxy.
    /// Same answers either way; `false` is the switch to rule it out.
    pub direct_lane: bool,
    /// Peers whose `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Request-Id`
    /// are believed (load balancers in front of waitgate).
    pub trusted_proxies: Vec<ipnet::IpNet>,
    pub redis: RedisConfig,
    pub jwt: JwtConfig,
    /// Queues by name, in name order.
    pub queues: BTreeMap<String, QueueConfig>,
    pub upstreams: BTreeMap<String, UpstreamConfig>,
    /// In file order: the first matching prefix wins.
    pub routes: Vec<RouteConfig>,
    pub log: LogConfig,
    /// Cookies, this site's origin and the other origins allowed to call
    /// the queue API from a browser.
    pub browsers: BrowserConfig,
    /// Take register's and rank's userId from the site's own login token
    /// instead of from the request.
    pub identity: Option<IdentityConfig>,
}

/// What browsers need: how cookies are written and which origins count.
#[derive(Debug, Clone)]
pub struct BrowserConfig {
    /// `Secure` on waitgate's cookies (off only for plain-HTTP demos).
    pub secure_cookies: bool,
    pub origins: crate::browser::origin::Origins,
}

/// The site's login token, from which register and rank take the userId
/// (its `sub`), so that nobody can queue as someone else.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    pub issuer: String,
    pub audience: String,
    pub key: IdentityKey,
    /// A cookie that holds the login token, read when `Authorization` does
    /// not carry one.
    pub cookie: Option<String>,
    pub leeway: Duration,
}

/// How the login token is verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityKey {
    /// HS256, with the secret in this environment variable.
    SecretEnv(String),
    /// RS256 or ES256, with the public keys of this JWKS file.
    JwksFile(PathBuf),
}

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

/// The logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// One line per request at `info` (target `waitgate::access`).
    pub access: bool,
    pub format: LogFormat,
    /// The `tracing` filter (`RUST_LOG` syntax); `RUST_LOG`, when set, wins.
    pub filter: String,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A map each of whose keys may appear once. YAML reads a repeated key
/// into a map as the last one written, so an operator who edits the first
/// of two `soccer:` queues would change nothing, silently; struct keys get
/// the same refusal from serde already.
fn unique_keys<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
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

/// Loads the listener's certificate chain and key as Pingora will and
/// builds the TLS server config from them: Pingora does that only when the
/// listener starts, and panics in its thread on a file it cannot use,
/// leaving a process that serves nothing and answers its health checks.
fn check_tls_pair(cert: &Path, key: &Path) -> Result<(), ConfigError> {
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

/// Two listeners that would take the same connections: one port, and the
/// same address or an unspecified one that covers the other's (`0.0.0.0`
/// every IPv4 address, `[::]` every address, as Linux binds it
/// dual-stack). Linux refuses the second bind of such a pair, so the check
/// must refuse it too, not say OK to a config that cannot start.
fn overlap(a: SocketAddr, b: SocketAddr) -> bool {
    let covers = |wide: IpAddr, other: IpAddr| match wide {
        IpAddr::V4(v4) => v4.is_unspecified() && other.to_canonical().is_ipv4(),
        IpAddr::V6(v6) => v6.is_unspecified(),
    };
    a.port() == b.port()
        && (a.ip().to_canonical() == b.ip().to_canonical()
            || covers(a.ip(), b.ip())
            || covers(b.ip(), a.ip()))
}

/// Reads `redis.tls`'s files as the Redis client will: it parses them only
/// when it connects, so a CA file with no certificate in it would
/// otherwise pass the check and fail every connection later, and a broken
/// one stop start-up with the PEM parser's words.
fn check_redis_tls(tls: &RawRedisTls) -> Result<(), ConfigError> {
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

/// A PEM reading error in words (the parser's own name the bytes of the
/// line it stopped at as numbers).
fn pem_problem(e: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { .. } => "a PEM section with no END line".into(),
        Error::IllegalSectionStart { .. } => "a malformed PEM BEGIN line".into(),
        Error::Base64Decode(_) => "a PEM section that is not Base64".into(),
        Error::NoItemsFound => "no PEM private key in it".into(),
        other => other.to_string(),
    }
}

/// The filter when neither `log.filter` nor `RUST_LOG` says otherwise:
/// waitgate's own events, and only warnings from its dependencies (Pingora
/// is chatty at info).
pub const DEFAULT_LOG_FILTER: &str = "warn,waitgate=info";

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

#[derive(Debug, Clone)]
pub struct JwtConfig {
    pub issuer: String,
    pub audience: String,
    pub ttl: Duration,
    pub leeway: Duration,
}

#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub heartbeat: HeartbeatConfig,
    pub admission: AdmissionConfig,
    pub page: PageConfig,
    /// `rank` needs the queueCredential too, so that nobody can keep
    /// another user's place alive or read it.
    pub require_credential: bool,
    /// How many places from the head `rank` answers exactly; beyond, ranks
    /// may be derived from samples of the waiting set, within 0.1% (see
    /// `store::ranks`), and are from place 10,000 on if this is smaller.
    pub exact_rank_window: u64,
}

/// The waiting-room page of a queue.
#[derive(Debug, Clone, Default)]
pub struct PageConfig {
    pub title: Option<String>,
    /// An operator's template, read and checked at load; the built-in page
    /// otherwise.
    pub template: Option<std::sync::Arc<crate::browser::template::Template>>,
}

#[derive(Debug, Clone)]
pub struct HeartbeatConfig {
    /// A waiting user is removed once this has passed since the last poll
    /// plus the poll advice that poll was given.
    pub timeout: Duration,
    /// The bounds of the poll advice (`pollAfterMs`): about a quarter of
    /// the expected wait, within these.
    pub poll_min: Duration,
    pub poll_max: Duration,
    pub cleanup_interval: Duration,
    pub cleanup_batch_size: u32,
    /// After Redis was out of reach, how long clients are given to come
    /// back before silence counts again (see `outage_cutoff` in
    /// `lua/lib.lua`).
    pub outage_grace: Duration,
}

#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    pub interval: Duration,
    pub batch_size: u32,
    /// How long an admitted user stays active (and the latest any token of
    /// theirs may expire).
    pub active_ttl: Duration,
    /// 0 = no cap.
    pub max_active: u64,
}

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
struct RawConfig {
    #[serde(default = "defaults::listen")]
    listen: String,
    #[serde(default = "defaults::admin_listen")]
    admin_listen: String,
    #[serde(default)]
    listen_tls: Option<RawTlsListener>,
    #[serde(default = "defaults::threads")]
    threads: u64,
    #[serde(default = "defaults::grace_period_s")]
    grace_period_s: u64,
    #[serde(default = "defaults::max_connections")]
    max_connections: u64,
    #[serde(default = "defaults::client_timeout_ms")]
    client_header_timeout_ms: u64,
    #[serde(default = "defaults::client_timeout_ms")]
    client_body_timeout_ms: u64,
    #[serde(default = "defaults::direct_lane")]
    direct_lane: bool,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    redis: RawRedis,
    #[serde(default)]
    jwt: RawJwt,
    #[serde(deserialize_with = "unique_keys")]
    queues: BTreeMap<String, RawQueue>,
    #[serde(deserialize_with = "unique_keys")]
    upstreams: BTreeMap<String, RawUpstream>,
    routes: Vec<RawRoute>,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    cookies: RawCookies,
    #[serde(default)]
    cors: RawCors,
    #[serde(default)]
    public_origin: Option<String>,
    #[serde(default)]
    identity: Option<RawIdentity>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawCookies {
    secure: bool,
}

impl Default for RawCookies {
    fn default() -> Self {
        RawCookies { secure: true }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawCors {
    allowed_origins: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawIdentity {
    issuer: String,
    audience: String,
    #[serde(default)]
    secret_env: Option<String>,
    #[serde(default)]
    jwks_file: Option<PathBuf>,
    #[serde(default)]
    cookie: Option<String>,
    #[serde(default = "defaults::identity_leeway_s")]
    leeway_s: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawTlsListener {
    address: String,
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default = "defaults::h2_max_streams")]
    h2_max_streams: u64,
    #[serde(default = "defaults::h2_window_bytes")]
    h2_window_bytes: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawLog {
    access: bool,
    format: String,
    filter: String,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            access: true,
            format: "text".into(),
            filter: DEFAULT_LOG_FILTER.into(),
        }
    }
}

impl RawLog {
    fn validate(self) -> Result<LogConfig, ConfigError> {
        let format = match self.format.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(invalid(
                    "log.format",
                    format!("must be text or json (got `{other}`)"),
                ))
            }
        };
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&self.filter) {
            return Err(invalid("log.filter", format!("not a valid filter: {e}")));
        }
        Ok(LogConfig {
            access: self.access,
            format,
            filter: self.filter,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRedis {
    #[serde(default = "defaults::redis_mode")]
    mode: String,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    sentinels: Vec<String>,
    #[serde(default)]
    master_name: Option<String>,
    #[serde(default)]
    nodes: Vec<String>,
    #[serde(default)]
    tls: Option<RawRedisTls>,
    #[serde(default = "defaults::command_timeout_ms")]
    command_timeout_ms: u64,
    #[serde(default)]
    wait_replicas: u64,
    #[serde(default = "defaults::wait_timeout_ms")]
    wait_timeout_ms: u64,
    #[serde(default = "defaults::coalesce")]
    coalesce: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRedisTls {
    #[serde(default)]
    ca_file: Option<PathBuf>,
    #[serde(default)]
    cert_file: Option<PathBuf>,
    #[serde(default)]
    key_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawJwt {
    issuer: String,
    audience: String,
    ttl_ms: u64,
    leeway_s: u64,
}

impl Default for RawJwt {
    fn default() -> Self {
        RawJwt {
            issuer: "waitgate".into(),
            audience: "ticketing".into(),
            ttl_ms: 600_000,
            leeway_s: 5,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawQueue {
    heartbeat: RawHeartbeat,
    admission: RawAdmission,
    page: RawPage,
    require_credential: bool,
    exact_rank_window: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawPage {
    title: Option<String>,
    template: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawHeartbeat {
    timeout_ms: u64,
    cleanup_interval_ms: u64,
    cleanup_batch_size: u64,
    poll_min_ms: u64,
    poll_max_ms: u64,
    outage_grace_ms: u64,
}

impl Default for RawHeartbeat {
    fn default() -> Self {
        RawHeartbeat {
            timeout_ms: 30_000,
            cleanup_interval_ms: 10_000,
            cleanup_batch_size: 500,
            poll_min_ms: 1_000,
            poll_max_ms: 30_000,
            // The page and the JS client wait at most 8 s between tries.
            outage_grace_ms: 10_000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawAdmission {
    interval_ms: u64,
    batch_size: u64,
    active_ttl_ms: u64,
    max_active: u64,
}

impl Default for RawAdmission {
    fn default() -> Self {
        RawAdmission {
            interval_ms: 3_000,
            batch_size: 100,
            active_ttl_ms: 600_000,
            max_active: 0,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawUpstream {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    addresses: Option<Vec<String>>,
    #[serde(default = "defaults::resolve_interval_s")]
    resolve_interval_s: u64,
    #[serde(default = "defaults::load_balancing")]
    load_balancing: String,
    #[serde(default)]
    health_check: Option<RawHealthCheck>,
    #[serde(default)]
    tls: RawTls,
    #[serde(default)]
    sni: Option<String>,
    #[serde(default = "defaults::connect_timeout_ms")]
    connect_timeout_ms: u64,
    #[serde(default = "defaults::read_timeout_ms")]
    read_timeout_ms: u64,
}

/// `tls: true|false`, or `tls: {sni, ca-file}` (which turns TLS on).
#[derive(Default)]
struct RawTls {
    on: bool,
    sni: Option<String>,
    ca_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawTlsMap {
    #[serde(default)]
    sni: Option<String>,
    #[serde(default)]
    ca_file: Option<PathBuf>,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
struct RawHealthCheck {
    path: String,
    interval_ms: u64,
    timeout_ms: u64,
}

impl Default for RawHealthCheck {
    fn default() -> Self {
        RawHealthCheck {
            path: "/".into(),
            interval_ms: 1_000,
            timeout_ms: 500,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRoute {
    prefix: String,
    upstream: String,
    queue: String,
    #[serde(default)]
    websocket: bool,
    #[serde(default)]
    waiting_room: bool,
}

mod defaults {
    pub fn listen() -> String {
        "127.0.0.1:8080".into()
    }
    pub fn admin_listen() -> String {
        "127.0.0.1:9091".into()
    }
    pub fn threads() -> u64 {
        2
    }
    pub fn grace_period_s() -> u64 {
        5
    }
    pub fn max_connections() -> u64 {
        10_000
    }
    /// Measured (tests/h2_budget.rs): a connection with this many requests
    /// waiting for their bodies costs about three HTTP/1.1 connections
    /// with one each; browsers open six connections a host over HTTP/1.1.
    pub fn h2_max_streams() -> u64 {
        6
    }
    /// HTTP/2's initial window (RFC 9113 §6.9.2).
    pub fn h2_window_bytes() -> u64 {
        65_535
    }
    pub fn direct_lane() -> bool {
        true
    }
    pub fn client_timeout_ms() -> u64 {
        10_000
    }
    pub fn command_timeout_ms() -> u64 {
        500
    }
    pub fn connect_timeout_ms() -> u64 {
        2_000
    }
    pub fn redis_mode() -> String {
        "standalone".into()
    }
    pub fn wait_timeout_ms() -> u64 {
        100
    }
    pub fn resolve_interval_s() -> u64 {
        30
    }
    pub fn load_balancing() -> String {
        "round-robin".into()
    }
    pub fn read_timeout_ms() -> u64 {
        30_000
    }
    pub fn coalesce() -> bool {
        true
    }
    pub fn identity_leeway_s() -> u64 {
        5
    }
}

// ---------------------------------------------------------------------------
// Bounds. Lower bounds keep the background loops from spinning; upper bounds
// keep one Lua script call short (Redis runs scripts one at a time, so a huge
// batch would stall every other client).

pub const MAX_BATCH: u64 = 10_000;
/// A window past any queue: every rank exact (and places stay far below
/// the 2^53 a script's numbers hold exactly).
pub const MAX_EXACT_RANK_WINDOW: u64 = 1_000_000_000;
pub const MIN_INTERVAL_MS: u64 = 10;
pub const MAX_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;
const MAX_NAME_LEN: usize = 64;

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parses and validates a configuration held in memory.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            serde_yaml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        raw.validate()
    }

    /// The queue a request names, or the only one when it names none.
    pub fn single_queue(&self) -> Option<&str> {
        match self.queues.len() {
            1 => self.queues.keys().next().map(String::as_str),
            _ => None,
        }
    }
}

impl RawConfig {
    fn validate(self) -> Result<Config, ConfigError> {
        let listen = socket_addr("listen", &self.listen)?;
        let admin_listen = socket_addr("admin-listen", &self.admin_listen)?;
        let listen_tls = match self.listen_tls {
            None => None,
            Some(tls) => {
                let address = socket_addr("listen-tls.address", &tls.address)?;
                if overlap(address, listen) || overlap(address, admin_listen) {
                    return Err(invalid(
                        "listen-tls.address",
                        "must differ from listen and admin-listen",
                    ));
                }
                for (key, path) in [("cert-file", &tls.cert_file), ("key-file", &tls.key_file)] {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        invalid(
                            format!("listen-tls.{key}"),
                            format!("{}: {e}", path.display()),
                        )
                    })?;
                    if !text.contains("-----BEGIN ") {
                        return Err(invalid(
                            format!("listen-tls.{key}"),
                            format!("{}: not PEM", path.display()),
                        ));
                    }
                }
                check_tls_pair(&tls.cert_file, &tls.key_file)?;
                Some(TlsListener {
                    address,
                    cert_file: tls.cert_file,
                    key_file: tls.key_file,
                    h2_max_streams: ranged(
                        "listen-tls.h2-max-streams",
                        tls.h2_max_streams,
                        1,
                        1000,
                    )? as u32,
                    // The protocol's own bounds: at least its initial
                    // window, at most 2^31 - 1.
                    h2_window_bytes: ranged(
                        "listen-tls.h2-window-bytes",
                        tls.h2_window_bytes,
                        65_535,
                        (1 << 31) - 1,
                    )? as u32,
                })
            }
        };
        if overlap(listen, admin_listen) {
            return Err(invalid(
                "admin-listen",
                format!("must differ from listen ({listen})"),
            ));
        }
        let threads = ranged("threads", self.threads, 1, 256)? as usize;
        let grace_period =
            Duration::from_secs(ranged("grace-period-s", self.grace_period_s, 0, 300)?);
        let clients = ClientLimits {
            max_connections: ranged("max-connections", self.max_connections, 1, 1_000_000)?
                as usize,
            header_timeout: Duration::from_millis(ranged(
                "client-header-timeout-ms",
                self.client_header_timeout_ms,
                100,
                600_000,
            )?),
            body_timeout: Duration::from_millis(ranged(
                "client-body-timeout-ms",
                self.client_body_timeout_ms,
                100,
                600_000,
            )?),
        };

        let trusted_proxies = self
            .trusted_proxies
            .iter()
            .enumerate()
            .map(|(i, cidr)| cidr_or_ip(&format!("trusted-proxies[{i}]"), cidr))
            .collect::<Result<Vec<_>, _>>()?;
        let redis = self.redis.validate()?;
        let jwt = self.jwt.validate()?;

        if self.queues.is_empty() {
            return Err(invalid("queues", "at least one queue is required"));
        }
        let mut queues = BTreeMap::new();
        for (name, raw) in self.queues {
            let key = format!("queues.{name}");
            check_name(&key, &name)?;
            let queue = raw.validate(&key)?;
            queues.insert(name, queue);
        }

        let mut upstreams = BTreeMap::new();
        for (name, raw) in self.upstreams {
            let key = format!("upstreams.{name}");
            check_name(&key, &name)?;
            upstreams.insert(name, raw.validate(&key)?);
        }

        let mut routes = Vec::with_capacity(self.routes.len());
        for (i, raw) in self.routes.into_iter().enumerate() {
            let key = format!("routes[{i}]");
            check_route_prefix(&format!("{key}.prefix"), &raw.prefix)?;
            if !upstreams.contains_key(&raw.upstream) {
                return Err(invalid(
                    format!("{key}.upstream"),
                    format!("names no upstream: `{}`", raw.upstream),
                ));
            }
            if !queues.contains_key(&raw.queue) {
                return Err(invalid(
                    format!("{key}.queue"),
                    format!("names no queue: `{}`", raw.queue),
                ));
            }
            // The first matching prefix wins, so a route under an earlier
            // one would never be used.
            if let Some((earlier, shadow)) =
                routes
                    .iter()
                    .enumerate()
                    .find(|(_, r): &(usize, &RouteConfig)| {
                        crate::path::under_prefix(&raw.prefix, &r.prefix)
                    })
            {
                let why = if shadow.prefix == raw.prefix {
                    format!(
                        "`{}` is already the prefix of routes[{earlier}]",
                        raw.prefix
                    )
                } else {
                    format!(
                        "`{}` is shadowed by routes[{earlier}] (`{}`), which comes first and \
                         matches every path under it; list the longer prefix first",
                        raw.prefix, shadow.prefix
                    )
                };
                return Err(invalid(format!("{key}.prefix"), why));
            }
            routes.push(RouteConfig {
                prefix: raw.prefix,
                upstream: raw.upstream,
                queue: raw.queue,
                websocket: raw.websocket,
                waiting_room: raw.waiting_room,
            });
        }

        let mut allowed = Vec::new();
        for (i, origin) in self.cors.allowed_origins.iter().enumerate() {
            allowed.push(crate::browser::origin::parse_origin(origin).ok_or_else(|| {
                invalid(
                    format!("cors.allowed-origins[{i}]"),
                    "must be an origin: http(s)://host[:port], with no path",
                )
            })?);
        }
        let public = match &self.public_origin {
            None => None,
            Some(origin) => {
                Some(crate::browser::origin::parse_origin(origin).ok_or_else(|| {
                    invalid(
                        "public-origin",
                        "must be an origin: http(s)://host[:port], with no path",
                    )
                })?)
            }
        };
        let browsers = BrowserConfig {
            secure_cookies: self.cookies.secure,
            origins: crate::browser::origin::Origins { public, allowed },
        };
        let identity = self.identity.map(RawIdentity::validate).transpose()?;

        Ok(Config {
            listen,
            admin_listen,
            listen_tls,
            threads,
            grace_period,
            clients,
            direct_lane: self.direct_lane,
            trusted_proxies,
            redis,
            jwt,
            queues,
            upstreams,
            routes,
            log: self.log.validate()?,
            browsers,
            identity,
        })
    }
}

impl RawIdentity {
    fn validate(self) -> Result<IdentityConfig, ConfigError> {
        if self.issuer.trim().is_empty() {
            return Err(invalid("identity.issuer", "must not be empty"));
        }
        if self.audience.trim().is_empty() {
            return Err(invalid("identity.audience", "must not be empty"));
        }
        let key = match (self.secret_env, self.jwks_file) {
            (Some(env), None) => {
                if env.is_empty() || !env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(invalid(
                        "identity.secret-env",
                        "must be the name of an environment variable",
                    ));
                }
                IdentityKey::SecretEnv(env)
            }
            (None, Some(path)) => {
                std::fs::metadata(&path).map_err(|e| {
                    invalid("identity.jwks-file", format!("{}: {e}", path.display()))
                })?;
                IdentityKey::JwksFile(path)
            }
            _ => {
                return Err(invalid(
                    "identity",
                    "give exactly one of secret-env (HS256) and jwks-file (RS256, ES256)",
                ))
            }
        };
        if let Some(cookie) = &self.cookie {
            if cookie.is_empty()
                || !cookie
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            {
                return Err(invalid("identity.cookie", "must be a cookie name"));
            }
        }
        Ok(IdentityConfig {
            issuer: self.issuer,
            audience: self.audience,
            key,
            cookie: self.cookie,
            leeway: Duration::from_secs(ranged("identity.leeway-s", self.leeway_s, 0, 300)?),
        })
    }
}

/// A Redis URL (`redis://` or `rediss://`) the redis crate accepts.
fn redis_url(key: &str, url: &str) -> Result<String, ConfigError> {
    let url = url.trim().to_string();
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        return Err(invalid(key, "must start with redis:// or rediss://"));
    }
    if let Err(e) = redis::Client::open(url.as_str()) {
        return Err(invalid(key, format!("not a valid Redis URL: {e}")));
    }
    Ok(url)
}

impl RawRedis {
    fn validate(self) -> Result<RedisConfig, ConfigError> {
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
                if self.sentinels.is_empty() {
                    return Err(invalid("redis.sentinels", "list at least one Sentinel"));
                }
                let sentinels = self
                    .sentinels
                    .iter()
                    .map(|u| redis_url("redis.sentinels", u))
                    .collect::<Result<_, _>>()?;
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
                if self.nodes.is_empty() {
                    return Err(invalid("redis.nodes", "list at least one node"));
                }
                let nodes = self
                    .nodes
                    .iter()
                    .map(|u| redis_url("redis.nodes", u))
                    .collect::<Result<_, _>>()?;
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
        Ok(RedisConfig {
            mode,
            tls,
            command_timeout: Duration::from_millis(ms),
            wait_replicas,
            wait_timeout: Duration::from_millis(wait_ms),
            coalesce: self.coalesce,
        })
    }
}

impl RawJwt {
    fn validate(self) -> Result<JwtConfig, ConfigError> {
        if self.issuer.trim().is_empty() {
            return Err(invalid("jwt.issuer", "must not be empty"));
        }
        if self.audience.trim().is_empty() {
            return Err(invalid("jwt.audience", "must not be empty"));
        }
        let ttl = ranged("jwt.ttl-ms", self.ttl_ms, 1_000, MAX_DURATION_MS)?;
        let leeway = ranged("jwt.leeway-s", self.leeway_s, 0, 300)?;
        Ok(JwtConfig {
            issuer: self.issuer,
            audience: self.audience,
            ttl: Duration::from_millis(ttl),
            leeway: Duration::from_secs(leeway),
        })
    }
}

impl RawQueue {
    fn validate(self, key: &str) -> Result<QueueConfig, ConfigError> {
        let h = self.heartbeat;
        let a = self.admission;
        let heartbeat = HeartbeatConfig {
            timeout: millis(&format!("{key}.heartbeat.timeout-ms"), h.timeout_ms)?,
            cleanup_interval: millis(
                &format!("{key}.heartbeat.cleanup-interval-ms"),
                h.cleanup_interval_ms,
            )?,
            cleanup_batch_size: ranged(
                &format!("{key}.heartbeat.cleanup-batch-size"),
                h.cleanup_batch_size,
                1,
                MAX_BATCH,
            )? as u32,
            poll_min: millis(&format!("{key}.heartbeat.poll-min-ms"), h.poll_min_ms)?,
            poll_max: millis(&format!("{key}.heartbeat.poll-max-ms"), h.poll_max_ms)?,
            outage_grace: Duration::from_millis(ranged(
                &format!("{key}.heartbeat.outage-grace-ms"),
                h.outage_grace_ms,
                0,
                3_600_000,
            )?),
        };
        if heartbeat.poll_max < heartbeat.poll_min {
            return Err(invalid(
                format!("{key}.heartbeat.poll-max-ms"),
                "must be at least poll-min-ms",
            ));
        }
        let admission = AdmissionConfig {
            interval: millis(&format!("{key}.admission.interval-ms"), a.interval_ms)?,
            batch_size: ranged(
                &format!("{key}.admission.batch-size"),
                a.batch_size,
                1,
                MAX_BATCH,
            )? as u32,
            active_ttl: millis(&format!("{key}.admission.active-ttl-ms"), a.active_ttl_ms)?,
            max_active: a.max_active,
        };
        let template = match &self.page.template {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        format!("{key}.page.template"),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                let template = crate::browser::template::Template::parse(&text).map_err(|e| {
                    invalid(
                        format!("{key}.page.template"),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                Some(std::sync::Arc::new(template))
            }
        };
        if let Some(title) = &self.page.title {
            if title.trim().is_empty() || title.chars().count() > 200 {
                return Err(invalid(
                    format!("{key}.page.title"),
                    "must be 1 to 200 characters",
                ));
            }
        }
        Ok(QueueConfig {
            heartbeat,
            admission,
            page: PageConfig {
                title: self.page.title,
                template,
            },
            require_credential: self.require_credential,
            exact_rank_window: ranged(
                &format!("{key}.exact-rank-window"),
                self.exact_rank_window.unwrap_or(1_000),
                0,
                MAX_EXACT_RANK_WINDOW,
            )?,
        })
    }
}

impl RawUpstream {
    fn validate(self, key: &str) -> Result<UpstreamConfig, ConfigError> {
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

/// `host:port` or `[v6]:port` → the host part, if the port is a valid one.
fn split_host_port(address: &str) -> Option<&str> {
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
fn cidr_or_ip(key: &str, value: &str) -> Result<ipnet::IpNet, ConfigError> {
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

fn socket_addr(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .trim()
        .parse()
        .map_err(|_| invalid(key, format!("`{value}` is not an ip:port address")))
}

fn ranged(key: &str, value: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
    if value < min || value > max {
        return Err(invalid(
            key,
            format!("must be between {min} and {max} (got {value})"),
        ));
    }
    Ok(value)
}

fn millis(key: &str, value: u64) -> Result<Duration, ConfigError> {
    ranged(key, value, MIN_INTERVAL_MS, MAX_DURATION_MS).map(Duration::from_millis)
}

/// Queue and upstream names end up in Redis keys and metric labels: keep them
/// plain. Braces in particular would break the `{queue}` hash tag.
fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("name must be 1..{MAX_NAME_LEN} characters of A-Z a-z 0-9 _ -"),
        ))
    }
}

fn check_route_prefix(key: &str, prefix: &str) -> Result<(), ConfigError> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "
redis:
  url: redis://127.0.0.1:6379/0
queues:
  baseball: {}
upstreams: {}
routes: []
";

    fn with(extra: &str) -> String {
        format!("{MINIMAL}{extra}")
    }

    fn error_of(text: &str) -> String {
        Config::from_yaml(text).unwrap_err().to_string()
    }

    #[test]
    fn minimal_file_takes_the_defaults() {
        let c = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.admin_listen.to_string(), "127.0.0.1:9091");
        assert_eq!(c.threads, 2);
        assert_eq!(c.grace_period, Duration::from_secs(5));
        assert_eq!(c.clients.max_connections, 10_000);
        assert_eq!(c.clients.header_timeout, Duration::from_secs(10));
        assert_eq!(c.clients.body_timeout, Duration::from_secs(10));
        assert_eq!(c.redis.command_timeout, Duration::from_millis(500));
        assert_eq!(c.jwt.ttl, Duration::from_secs(600));
        assert_eq!(c.jwt.leeway, Duration::from_secs(5));
        let q = &c.queues["baseball"];
        assert_eq!(q.heartbeat.timeout, Duration::from_secs(30));
        assert_eq!(q.heartbeat.cleanup_interval, Duration::from_secs(10));
        assert_eq!(q.heartbeat.cleanup_batch_size, 500);
        assert_eq!(q.admission.interval, Duration::from_secs(3));
        assert_eq!(q.admission.batch_size, 100);
        assert_eq!(q.admission.active_ttl, Duration::from_secs(600));
        assert_eq!(q.admission.max_active, 0);
        assert_eq!(c.single_queue(), Some("baseball"));
        assert!(c.direct_lane);
        assert!(c.trusted_proxies.is_empty());
    }

    #[test]
    fn trusted_proxies_take_cidrs_and_single_addresses() {
        let c = Config::from_yaml(&with(
            "trusted-proxies: ['10.0.0.0/8', '192.0.2.7', '2001:db8::1/32']\ndirect-lane: false\n",
        ))
        .unwrap();
        let nets: Vec<String> = c.trusted_proxies.iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"]);
        assert!(!c.direct_lane);
        let e = error_of(&with("trusted-proxies: ['10.0.0.0/8', 'lb.internal']\n"));
        assert!(e.starts_with("trusted-proxies[1]:"), "{e}");
    }

    #[test]
    fn a_queue_names_its_exact_rank_window() {
        let yaml = |q: &str| {
            format!(
                "redis: {{url: 'redis://x:1'}}\nqueues: {{a: {q}}}\nupstreams: {{}}\nroutes: []\n"
            )
        };
        let c = Config::from_yaml(&yaml("{exact-rank-window: 5000}")).unwrap();
        assert_eq!(c.queues["a"].exact_rank_window, 5000);
        let c = Config::from_yaml(&yaml("{}")).unwrap();
        assert_eq!(c.queues["a"].exact_rank_window, 1000);
        let e = error_of(&yaml("{exact-rank-window: -1}"));
        assert!(e.contains("exact-rank-window"), "{e}");
        let e = error_of(&yaml("{exact-rank-window: 1000000001}"));
        assert!(e.contains("exact-rank-window"), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let e = error_of(&with("treads: 4\n"));
        assert!(e.contains("treads"), "{e}");
        let e = error_of(
            "redis: {url: 'redis://x:1', timeout: 3}\nqueues: {a: {}}\nupstreams: {}\nroutes: []\n",
        );
        assert!(e.contains("timeout"), "{e}");
        let e = error_of(
            "redis: {url: 'redis://x:1'}\nqueues: {a: {admission: {batch: 3}}}\nupstreams: {}\nroutes: []\n",
        );
        assert!(e.contains("batch"), "{e}");
    }

    #[test]
    fn an_upstream_address_listed_twice_is_refused() {
        let e = error_of(
            "redis: {url: 'redis://x:1'}\nqueues: {a: {}}\nupstreams: {u: {addresses: ['127.0.0.1:1', ' 127.0.0.1:1']}}\nroutes: []\n",
        );
        assert!(e.starts_with("upstreams.u.addresses:"), "{e}");
        assert!(e.contains("listed twice"), "{e}");
    }

    #[test]
    fn required_keys_are_named_when_missing() {
        let e = error_of("queues: {a: {}}\nupstreams: {}\nroutes: []\n");
        assert!(e.contains("redis"), "{e}");
        let e = error_of("redis: {url: 'redis://x:1'}\nupstreams: {}\nroutes: []\n");
        assert!(e.contains("queues"), "{e}");
        let e = error_of("redis: {url: 'redis://x:1'}\nqueues: {}\nupstreams: {}\nroutes: []\n");
        assert!(e.starts_with("queues:"), "{e}");
    }

    #[test]
    fn listeners_that_would_share_connections_overlap() {
        let a = |text: &str| text.parse::<SocketAddr>().unwrap();
        for (x, y) in [
            ("127.0.0.1:80", "127.0.0.1:80"),
            ("0.0.0.0:80", "10.1.2.3:80"),
            ("[::]:80", "127.0.0.1:80"),
            ("[::]:80", "[::1]:80"),
            ("0.0.0.0:80", "[::ffff:10.0.0.1]:80"),
        ] {
            assert!(overlap(a(x), a(y)), "{x} {y}");
            assert!(overlap(a(y), a(x)), "{y} {x}");
        }
        for (x, y) in [
            ("0.0.0.0:80", "0.0.0.0:81"),
            ("127.0.0.1:80", "127.0.0.2:80"),
            ("0.0.0.0:80", "[::1]:80"),
        ] {
            assert!(!overlap(a(x), a(y)), "{x} {y}");
        }
    }

    #[test]
    fn values_out_of_range_name_their_key() {
        let cases = [
            ("threads: 0\n", "threads:"),
            ("grace-period-s: 100000\n", "grace-period-s:"),
            ("listen: localhost\n", "listen:"),
            ("admin-listen: 127.0.0.1:8080\n", "admin-listen:"),
            (
                "listen: 0.0.0.0:8080\nadmin-listen: 127.0.0.1:8080\n",
                "admin-listen:",
            ),
            (
                "listen: '[::]:8080'\nadmin-listen: 127.0.0.1:8080\n",
                "admin-listen:",
            ),
            ("max-connections: 0\n", "max-connections:"),
            ("client-header-timeout-ms: 5\n", "client-header-timeout-ms:"),
        ];
        for (extra, key) in cases {
            let e = error_of(&with(extra));
            assert!(e.starts_with(key), "{extra:?} gave {e}");
        }
        let bad_queue = |body: &str| {
            error_of(&format!(
                "redis: {{url: 'redis://x:1'}}\nqueues: {{q: {body}}}\nupstreams: {{}}\nroutes: []\n"
            ))
        };
        let e = bad_queue("{admission: {batch-size: 0}}");
        assert!(e.starts_with("queues.q.admission.batch-size:"), "{e}");
        let e = bad_queue("{admission: {interval-ms: 0}}");
        assert!(e.starts_with("queues.q.admission.interval-ms:"), "{e}");
        let e = bad_queue("{heartbeat: {timeout-ms: 1}}");
        assert!(e.starts_with("queues.q.heartbeat.timeout-ms:"), "{e}");
        let e = bad_queue("{heartbeat: {cleanup-batch-size: 0}}");
        assert!(
            e.starts_with("queues.q.heartbeat.cleanup-batch-size:"),
            "{e}"
        );
        let e = bad_queue("{admission: {batch-size: -3}}");
        assert!(e.contains("batch-size"), "{e}");
    }

    #[test]
    fn redis_url_is_checked() {
        let e =
            error_of("redis: {url: 'http://x:1'}\nqueues: {a: {}}\nupstreams: {}\nroutes: []\n");
        assert!(e.starts_with("redis.url:"), "{e}");
        let e = error_of(
            "redis: {url: 'redis://x:1', command-timeout-ms: 0}\nqueues: {a: {}}\nupstreams: {}\nroutes: []\n",
        );
        assert!(e.starts_with("redis.command-timeout-ms:"), "{e}");
    }

    #[test]
    fn queue_names_cannot_break_the_hash_tag() {
        let e = error_of(
            "redis: {url: 'redis://x:1'}\nqueues: {'a}b': {}}\nupstreams: {}\nroutes: []\n",
        );
        assert!(e.starts_with("queues.a}b:"), "{e}");
    }

    #[test]
    fn routes_must_name_known_upstreams_and_queues() {
        let base = "redis: {url: 'redis://x:1'}\nqueues: {q: {}}\nupstreams: {up: {address: '127.0.0.1:9000'}}\n";
        let ok = format!("{base}routes: [{{prefix: /api/v1/follow-up, upstream: up, queue: q}}]\n");
        let c = Config::from_yaml(&ok).unwrap();
        assert_eq!(c.routes[0].prefix, "/api/v1/follow-up");
        assert_eq!(c.upstreams["up"].sni, "127.0.0.1");

        let e = error_of(&format!(
            "{base}routes: [{{prefix: /x, upstream: nope, queue: q}}]\n"
        ));
        assert!(e.starts_with("routes[0].upstream:"), "{e}");
        let e = error_of(&format!(
            "{base}routes: [{{prefix: /x, upstream: up, queue: nope}}]\n"
        ));
        assert!(e.starts_with("routes[0].queue:"), "{e}");
        let e = error_of(&format!(
            "{base}routes: [{{prefix: x, upstream: up, queue: q}}]\n"
        ));
        assert!(e.starts_with("routes[0].prefix:"), "{e}");
        let e = error_of(&format!(
            "{base}routes: [{{prefix: /x/, upstream: up, queue: q}}]\n"
        ));
        assert!(e.starts_with("routes[0].prefix:"), "{e}");
        let e = error_of(&format!(
            "{base}routes: [{{prefix: /a/../b, upstream: up, queue: q}}]\n"
        ));
        assert!(e.starts_with("routes[0].prefix:"), "{e}");
        let e = error_of(&format!(
            "{base}routes: [{{prefix: /api/v1/queue/x, upstream: up, queue: q}}]\n"
        ));
        assert!(e.starts_with("routes[0].prefix:"), "{e}");
        let e = error_of(&format!(
            "{base}routes: [{{prefix: /x, upstream: up, queue: q}}, {{prefix: /x, upstream: up, queue: q}}]\n"
        ));
        assert!(e.starts_with("routes[1].prefix:"), "{e}");
        let e = error_of(&format!(
            "{base}routes: [{{prefix: /x, upstream: up, queue: q}}, {{prefix: /x/y, upstream: up, queue: q}}]\n"
        ));
        assert!(e.starts_with("routes[1].prefix:"), "{e}");
        assert!(e.contains("shadowed by routes[0]"), "{e}");
        // The longer prefix first is fine, and so is a sibling.
        Config::from_yaml(&format!(
            "{base}routes: [{{prefix: /x/y, upstream: up, queue: q}}, {{prefix: /x, upstream: up, queue: q}}, {{prefix: /xy, upstream: up, queue: q}}]\n"
        ))
        .unwrap();
    }

    #[test]
    fn upstream_address_needs_a_port() {
        let base = "redis: {url: 'redis://x:1'}\nqueues: {q: {}}\nroutes: []\n";
        let e = error_of(&format!(
            "{base}upstreams: {{up: {{address: 'backend'}}}}\n"
        ));
        assert!(e.starts_with("upstreams.up.address:"), "{e}");
        let e = error_of(&format!(
            "{base}upstreams: {{up: {{address: 'backend:0'}}}}\n"
        ));
        assert!(e.starts_with("upstreams.up.address:"), "{e}");
        let c = Config::from_yaml(&format!(
            "{base}upstreams: {{up: {{address: '[::1]:443', tls: true}}}}\n"
        ))
        .unwrap();
        assert_eq!(c.upstreams["up"].sni, "::1");
        assert_eq!(c.upstreams["up"].connect_timeout, Duration::from_secs(2));
        assert_eq!(c.upstreams["up"].read_timeout, Duration::from_secs(30));
        let e = error_of(&format!(
            "{base}upstreams: {{up: {{address: 'b:1', connect-timeout-ms: 0}}}}\n"
        ));
        assert!(e.starts_with("upstreams.up.connect-timeout-ms:"), "{e}");
    }

    #[test]
    fn several_queues_have_no_default() {
        let c = Config::from_yaml(
            "redis: {url: 'redis://x:1'}\nqueues: {a: {}, b: {}}\nupstreams: {}\nroutes: []\n",
        )
        .unwrap();
        assert_eq!(c.single_queue(), None);
    }
}
